/**
 * Apps: long-running deployments, `replicas` sandboxes of a template running a command, kept
 * so by the platform. Create, scale, delete; an app's replicas are sandboxes, so their events
 * (`sandbox.*`) refetch the list, which shows the ready replicas as they come and go (and while
 * an app is not settled, the list is asked for again every few seconds).
 */
import { useEffect, useRef, useState } from "preact/hooks"
import { del, get, patch, post } from "../api.ts"
import { useConnection, useEvents } from "../events.ts"
import { Link } from "../router.tsx"
import { ErrorMessage, Field, Form, PageTitle, StateBadge, Status, Table, useAction, useResource } from "../ui.tsx"
import type { App, AppList } from "../wire.ts"

const SETTLE_POLL_MS = 2_000

const CreateApp = (props: { readonly onCreated: () => void }) => {
  const [name, setName] = useState("")
  const [template, setTemplate] = useState("base")
  const [command, setCommand] = useState("")
  const [replicas, setReplicas] = useState("1")
  const [ports, setPorts] = useState("")
  const [created, setCreated] = useState<string | undefined>(undefined)
  const action = useAction()
  const submit = () =>
    action.run(async () => {
      const exposed = ports.split(/[\s,]+/).filter(Boolean).map(Number)
      const app = await post<App>(
        "/v1/apps",
        {
          name,
          template,
          cmd: ["sh", "-c", command],
          replicas: Number(replicas),
          ...(exposed.length === 0 ? {} : { exposed_ports: exposed })
        },
        // A retried click is the same app, not a second one.
        { "idempotency-key": crypto.randomUUID() }
      )
      setCreated(app.name)
      setName("")
      props.onCreated()
    })
  return (
    <details class="panel">
      <summary>Deploy an app</summary>
      <Form label="Deploy an app" onSubmit={submit}>
        <Field label="App name" required value={name} onValue={setName} hint="a-z, 0-9 and -." />
        <Field label="Template" required value={template} onValue={setTemplate} />
        <Field
          label="Command"
          class="wide mono"
          required
          value={command}
          onValue={setCommand}
          placeholder="httpd -f -p 8080"
          hint="Run with sh -c in each replica."
        />
        <Field label="Replicas" type="number" min={0} max={100} required value={replicas} onValue={setReplicas} />
        <Field label="Exposed ports" value={ports} onValue={setPorts} placeholder="8080" hint="Optional." />
        <button type="submit" disabled={action.pending}>Deploy app</button>
      </Form>
      <ErrorMessage error={action.error} />
      {created === undefined ? null : <Status>Deploying {created}.</Status>}
    </details>
  )
}

const Row = (props: { readonly app: App; readonly onChanged: () => void }) => {
  const a = props.app
  const [replicas, setReplicas] = useState(String(a.replicas))
  const action = useAction()
  const scale = () =>
    action.run(async () => {
      await patch(`/v1/apps/${a.id}`, { replicas: Number(replicas) })
      props.onChanged()
    })
  const remove = () => {
    if (!window.confirm(`Delete the app ${a.name} and its replicas?`)) return
    void action.run(async () => {
      await del(`/v1/apps/${a.id}`)
      props.onChanged()
    })
  }
  return (
    <tr>
      <th scope="row">
        {a.name}
        <div class="muted mono">{a.id}</div>
      </th>
      <td>
        <StateBadge state={a.state} />
        {a.reason === null ? null : <div class="muted">{a.reason}</div>}
      </td>
      <td>{a.ready_replicas} of {a.replicas} ready</td>
      <td class="mono">{a.template}</td>
      <td class="mono ellipsis" title={a.cmd.join(" ")}>{a.cmd.join(" ")}</td>
      <td>
        {a.sandbox_ids.map((id) => (
          <div key={id}>
            <Link href={`/sandboxes/${id}`} class="mono">{id}</Link>
          </div>
        ))}
      </td>
      <td>
        <Form label={`Scale ${a.name}`} onSubmit={scale} class="form inline compact">
          <Field
            label={`Replicas of ${a.name}`}
            hideLabel
            type="number"
            min={0}
            max={100}
            required
            value={replicas}
            onValue={setReplicas}
          />
          <button type="submit" disabled={action.pending}>Scale</button>
        </Form>
        <button type="button" class="danger" onClick={remove} disabled={action.pending} aria-label={`Delete ${a.name}`}>
          Delete
        </button>
        <ErrorMessage error={action.error} />
      </td>
    </tr>
  )
}

export const Apps = () => {
  const list = useResource(() => get<AppList>("/v1/apps?limit=500"))
  // Replicas are sandboxes: their events change the apps. One refetch at a time, and once more
  // after one that raced an event.
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
  useEvents("sandbox.", refetch)
  useConnection(refetch)
  const rows = list.data?.apps ?? []
  // A replica turns ready when its command runs, which no event tells: while an app is not
  // settled, the page asks again every few seconds.
  const unsettled = rows.some((a) => a.state !== "running" || a.ready_replicas !== a.replicas)
  useEffect(() => {
    if (!unsettled) return
    const timer = setInterval(() => {
      if (document.visibilityState === "visible") refetch()
    }, SETTLE_POLL_MS)
    return () => clearInterval(timer)
  }, [unsettled])
  return (
    <section>
      <PageTitle>Apps</PageTitle>
      <CreateApp onCreated={refetch} />
      <ErrorMessage error={list.error} />
      <Table
        caption="Apps"
        columns={["Name", "State", "Replicas", "Template", "Command", "Sandboxes", "Actions"]}
        empty={list.data !== undefined && rows.length === 0}
        loading={list.data === undefined && list.error === undefined}
      >
        {rows.map((a) => <Row key={a.id} app={a} onChanged={refetch} />)}
      </Table>
    </section>
  )
}
