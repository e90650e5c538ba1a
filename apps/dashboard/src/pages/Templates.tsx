/**
 * Templates: the org's templates with their build state (live from `template.state_updated`),
 * build one from shell steps on a base or from an OCI image reference (with a registry secret for
 * a private registry), read a build's log, delete one.
 */
import { useState } from "preact/hooks"
import { del, get, post } from "../api.ts"
import { useEvents } from "../events.ts"
import {
  ErrorMessage,
  Field,
  Form,
  PageTitle,
  Select,
  StateBadge,
  Status,
  Table,
  TextArea,
  useAction,
  useResource,
  When
} from "../ui.tsx"
import type { Template, TemplatePage } from "../wire.ts"

const CreateTemplate = (props: { readonly onCreated: () => void }) => {
  const [name, setName] = useState("")
  const [from, setFrom] = useState<"base" | "image">("base")
  const [base, setBase] = useState("base")
  const [image, setImage] = useState("")
  const [registrySecret, setRegistrySecret] = useState("")
  const [steps, setSteps] = useState("")
  const [startCmd, setStartCmd] = useState("")
  const [readyCmd, setReadyCmd] = useState("")
  const [created, setCreated] = useState<string | undefined>(undefined)
  const action = useAction()
  const submit = () =>
    action.run(async () => {
      const runs = steps.split("\n").map((line) => line.trim()).filter(Boolean).map((run) => ({ run }))
      const record = await post<Template>("/v1/templates", {
        name,
        ...(from === "image"
          ? { image: image.trim(), ...(registrySecret === "" ? {} : { registry_secret: registrySecret }) }
          : { base }),
        ...(runs.length === 0 ? {} : { steps: runs }),
        ...(startCmd === "" ? {} : { start_cmd: startCmd }),
        ...(readyCmd === "" ? {} : { ready_cmd: readyCmd })
      })
      setCreated(record.name)
      setName("")
      props.onCreated()
    })
  return (
    <details class="panel">
      <summary>Build a template</summary>
      <Form label="Build a template" onSubmit={submit}>
        <Field label="Template name" required value={name} onValue={setName} />
        <Select
          label="Start from"
          value={from}
          onValue={(value) => setFrom(value === "image" ? "image" : "base")}
          options={[["base", "A base or template"], ["image", "An OCI image"]]}
        />
        {from === "base"
          ? (
            <Field
              label="Base"
              required
              value={base}
              onValue={setBase}
              hint="base, debian, or a ready template's name."
            />
          )
          : (
            <>
              <Field
                label="Image"
                required
                value={image}
                onValue={setImage}
                hint="A reference pulled for linux/amd64: registry.example.com/team/app:1.2 or …@sha256:…"
              />
              <Field
                label="Registry secret"
                value={registrySecret}
                onValue={setRegistrySecret}
                hint="Optional: a secret (user:password or a token) whose allowed hosts name the registry."
              />
            </>
          )}
        <TextArea label="Steps" rows={4} value={steps} onValue={setSteps} hint="One shell command per line." />
        <Field label="Start command" value={startCmd} onValue={setStartCmd} hint="Optional: runs at boot." />
        <Field label="Ready command" value={readyCmd} onValue={setReadyCmd} hint="Optional: passes once ready." />
        <button type="submit" disabled={action.pending}>Build template</button>
      </Form>
      <ErrorMessage error={action.error} />
      {created === undefined ? null : <Status>Building {created}.</Status>}
    </details>
  )
}

const Logs = (props: { readonly id: string }) => {
  const logs = useResource(() => get<string>(`/v1/templates/${props.id}/logs`), [props.id])
  return (
    <>
      <ErrorMessage error={logs.error} />
      <pre class="log" tabIndex={0} aria-label="Build log">{logs.data ?? "Loading…"}</pre>
      <button type="button" onClick={logs.reload}>Refresh the log</button>
    </>
  )
}

const Row = (props: { readonly template: Template; readonly onChanged: () => void }) => {
  const t = props.template
  const [open, setOpen] = useState(false)
  const action = useAction()
  const remove = () => {
    if (!window.confirm(`Delete the template ${t.name}?`)) return
    void action.run(async () => {
      await del(`/v1/templates/${t.id}`)
      props.onChanged()
    })
  }
  const builtIn = t.id === "base" || t.name === "base" || t.name === "debian"
  return (
    <>
      <tr>
        <th scope="row">
          {t.name}
          <div class="muted mono">{t.id}</div>
        </th>
        <td>
          <StateBadge state={t.state} />
          {t.errorMessage === null ? null : <div class="error">{t.errorMessage}</div>}
        </td>
        <td class="mono ellipsis" title={t.image_ref ?? undefined}>{t.image_ref ?? t.base}</td>
        <td class="mono ellipsis" title={t.image ?? undefined}>{t.image ?? "—"}</td>
        <td>
          <When at={t.builtAt} />
        </td>
        <td>
          <div class="actions">
            <button type="button" aria-expanded={open} onClick={() => setOpen(!open)}>
              {open ? "Hide log" : "Show log"} <span class="visually-hidden">of {t.name}</span>
            </button>
            {builtIn ? null : (
              <button type="button" class="danger" onClick={remove} aria-label={`Delete ${t.name}`}>
                Delete
              </button>
            )}
          </div>
          <ErrorMessage error={action.error} />
        </td>
      </tr>
      {open
        ? (
          <tr>
            <td colSpan={6}>
              <Logs id={t.id} />
            </td>
          </tr>
        )
        : null}
    </>
  )
}

export const Templates = () => {
  const list = useResource(() => get<TemplatePage>("/v1/templates?limit=500"))
  useEvents("template.", () => void list.reload())
  const rows = list.data?.rows ?? []
  return (
    <section>
      <PageTitle>Templates</PageTitle>
      <CreateTemplate onCreated={list.reload} />
      <ErrorMessage error={list.error} />
      <Table
        caption="Templates"
        columns={["Name", "State", "From", "Image", "Built", "Actions"]}
        empty={list.data !== undefined && rows.length === 0}
        loading={list.data === undefined && list.error === undefined}
      >
        {rows.map((t) => <Row key={t.id} template={t} onChanged={list.reload} />)}
      </Table>
    </section>
  )
}
