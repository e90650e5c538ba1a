/**
 * The org's sandboxes, kept current by the event stream (`sandbox.*`): a state change is applied
 * to its row as it arrives, a created or deleted sandbox refetches the list. Create, stop,
 * start and delete from here; a sandbox's page has the exec console and the terminal.
 */
import { useRef, useState } from "preact/hooks"
import { del, get, post, query } from "../api.ts"
import { type Envelope, useConnection, useEvents } from "../events.ts"
import { Link } from "../router.tsx"
import {
  ErrorMessage,
  Field,
  Form,
  Pager,
  PageTitle,
  Select,
  StateBadge,
  Status,
  Table,
  useAction,
  useResource,
  When
} from "../ui.tsx"
import type { Sandbox as SandboxRecord, SandboxPage, TemplatePage } from "../wire.ts"

/** Every state but `deleted`: what a list of one's sandboxes means. */
const LISTED = "pending,starting,running,stopping,stopped,deleting,error"
const PAGE = 50

/** A state change from the stream applied to a loaded list (pure). */
export const applyEvent = (rows: ReadonlyArray<SandboxRecord>, envelope: Envelope): ReadonlyArray<SandboxRecord> => {
  const id = envelope.data["sandbox_id"]
  if (envelope.event === "sandbox.state_updated") {
    return rows.map((row) => row.id === id ? { ...row, state: envelope.data["state"] } : row)
  }
  if (envelope.event === "sandbox.deleted") return rows.filter((row) => row.id !== id)
  return rows
}

/** Stop, start and delete for one sandbox (the list's rows and the sandbox's page). */
export const SandboxActions = (props: {
  readonly sandbox: SandboxRecord
  readonly onChanged: (record?: SandboxRecord) => void
  readonly onDeleted?: () => void
}) => {
  const { sandbox } = props
  const action = useAction()
  const label = sandbox.name || sandbox.id
  const act = (verb: "stop" | "start") =>
    action.run(async () => props.onChanged(await post<SandboxRecord>(`/v1/sandboxes/${sandbox.id}/${verb}`)))
  const remove = () => {
    if (!window.confirm(`Delete sandbox ${label}? Its files are gone with it.`)) return
    void action.run(async () => {
      await del(`/v1/sandboxes/${sandbox.id}`)
      props.onDeleted?.()
      props.onChanged()
    })
  }
  const busy = action.pending || sandbox.state === "deleting"
  return (
    <div class="actions">
      <button
        type="button"
        onClick={() => act("stop")}
        disabled={busy || sandbox.state !== "running"}
        aria-label={`Stop ${label}`}
      >
        Stop
      </button>
      <button
        type="button"
        onClick={() => act("start")}
        disabled={busy || (sandbox.state !== "stopped" && sandbox.state !== "error")}
        aria-label={`Start ${label}`}
      >
        Start
      </button>
      <button type="button" class="danger" onClick={remove} disabled={busy} aria-label={`Delete ${label}`}>
        Delete
      </button>
      <ErrorMessage error={action.error} />
    </div>
  )
}

const CreateSandbox = (props: {
  readonly templates: TemplatePage | undefined
  readonly onCreated: (record: SandboxRecord) => void
}) => {
  const [name, setName] = useState("")
  const [template, setTemplate] = useState("base")
  const [cpu, setCpu] = useState("1")
  const [ramMb, setRamMb] = useState("512")
  const [env, setEnv] = useState("")
  const action = useAction()
  const [created, setCreated] = useState<string | undefined>(undefined)
  const submit = () =>
    action.run(async () => {
      const envEntries = env.split(/\s+/).filter(Boolean).map((pair) => {
        const eq = pair.indexOf("=")
        return eq === -1 ? [pair, ""] : [pair.slice(0, eq), pair.slice(eq + 1)]
      })
      const record = await post<SandboxRecord>("/v1/sandboxes", {
        ...(name === "" ? {} : { name }),
        template,
        cpu: Number(cpu),
        ram_mb: Number(ramMb),
        ...(envEntries.length === 0 ? {} : { env: Object.fromEntries(envEntries) })
      })
      setCreated(record.name || record.id)
      setName("")
      props.onCreated(record)
    })
  const ready = (props.templates?.rows ?? []).filter((t) => t.state === "ready")
  // The built-in roots first (the org's list does not carry them), then the org's templates.
  const builtIn = ["base", "debian", "code"].filter((name) => !ready.some((t) => t.name === name))
  const options: Array<readonly [string, string]> = [
    ...builtIn.map((name) => [name, name] as const),
    ...ready.map((t) => [t.name, t.name] as const)
  ]
  return (
    <details class="panel" open>
      <summary>New sandbox</summary>
      <Form label="Create a sandbox" onSubmit={submit} class="form inline">
        <Field label="Name" value={name} onValue={setName} placeholder="optional" />
        <Select label="Template" value={template} onValue={setTemplate} options={options} />
        <Field label="CPUs" type="number" min={1} max={16} value={cpu} onValue={setCpu} />
        <Field label="Memory (MB)" type="number" min={64} step={64} value={ramMb} onValue={setRamMb} />
        <Field label="Environment" value={env} onValue={setEnv} placeholder="KEY=value KEY2=value" />
        <button type="submit" disabled={action.pending}>Create sandbox</button>
      </Form>
      <ErrorMessage error={action.error} />
      {created === undefined ? null : <Status>Created {created}; it starts in a moment.</Status>}
    </details>
  )
}

export const Sandboxes = () => {
  const [offset, setOffset] = useState(0)
  const list = useResource(
    () => get<SandboxPage>(`/v1/sandboxes${query({ state: LISTED, limit: PAGE, offset })}`),
    [offset]
  )
  const templates = useResource(() => get<TemplatePage>("/v1/templates?limit=500"))
  const templateName = (id: string) => templates.data?.rows.find((t) => t.id === id)?.name ?? id
  // Creations and deletions change the page: refetch, one at a time, and once more after one
  // in flight when something happened meanwhile (its answer may predate it).
  const refetching = useRef(false)
  const again = useRef(false)
  const refetch = () => {
    if (refetching.current) {
      again.current = true
      return
    }
    refetching.current = true
    void list.reload().finally(() => {
      refetching.current = false
      if (again.current) {
        again.current = false
        refetch()
      }
    })
  }
  useEvents("sandbox.", (envelope) => {
    if (
      envelope.event === "sandbox.state_updated" && list.data?.rows.some((r) => r.id === envelope.data["sandbox_id"])
    ) {
      list.setData({ ...list.data, rows: applyEvent(list.data.rows, envelope) })
    } else refetch()
  })
  useConnection(refetch)
  const rows = list.data?.rows ?? []
  return (
    <section>
      <PageTitle>Sandboxes</PageTitle>
      <CreateSandbox templates={templates.data} onCreated={refetch} />
      <ErrorMessage error={list.error} />
      <Table
        caption="Sandboxes"
        columns={["Name", "State", "Template", "CPU / memory", "Created", "Actions"]}
        empty={list.data !== undefined && rows.length === 0}
        loading={list.data === undefined && list.error === undefined}
        emptyText="No sandboxes yet. Create one above."
      >
        {rows.map((s) => (
          <tr key={s.id} data-sandbox-id={s.id}>
            <th scope="row">
              <Link href={`/sandboxes/${s.id}`}>{s.name || s.id}</Link>
              <div class="muted mono">{s.id}</div>
            </th>
            <td>
              <StateBadge state={s.state} />
            </td>
            <td class="mono">{templateName(s.templateId)}</td>
            <td>{s.cpu} CPU / {s.ramMb} MB</td>
            <td>
              <When at={s.createdAt} />
            </td>
            <td>
              <SandboxActions sandbox={s} onChanged={refetch} />
            </td>
          </tr>
        ))}
      </Table>
      {list.data === undefined ? null : <Pager page={list.data} label="Sandboxes" onOffset={setOffset} />}
    </section>
  )
}
