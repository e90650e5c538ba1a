/** Volumes: storage that outlives sandboxes; create (local or shared), see where attached, delete. */
import { useState } from "preact/hooks"
import { del, get, post } from "../api.ts"
import {
  ErrorMessage,
  Field,
  Form,
  PageTitle,
  Select,
  StateBadge,
  Table,
  useAction,
  useResource,
  When
} from "../ui.tsx"
import type { Volume, VolumeList } from "../wire.ts"

const CreateVolume = (props: { readonly onCreated: () => void }) => {
  const [name, setName] = useState("")
  const [size, setSize] = useState("1")
  const [type, setType] = useState("local")
  const action = useAction()
  const submit = () =>
    action.run(async () => {
      // A retried click is the same volume, not a second one.
      await post<Volume>(
        "/v1/volumes",
        { ...(name === "" ? {} : { name }), size_gb: Number(size), type },
        { "idempotency-key": crypto.randomUUID() }
      )
      setName("")
      props.onCreated()
    })
  return (
    <details class="panel">
      <summary>New volume</summary>
      <Form label="Create a volume" onSubmit={submit} class="form inline">
        <Field label="Volume name" value={name} onValue={setName} hint="Required for a shared volume." />
        <Field label="Size (GiB)" type="number" min={1} required value={size} onValue={setSize} />
        <Select label="Type" value={type} onValue={setType} options={[["local", "local"], ["shared", "shared"]]} />
        <button type="submit" disabled={action.pending}>Create volume</button>
      </Form>
      <ErrorMessage error={action.error} />
    </details>
  )
}

const Row = (props: { readonly volume: Volume; readonly onChanged: () => void }) => {
  const v = props.volume
  const action = useAction()
  const remove = () => {
    if (!window.confirm(`Delete the volume ${v.name}? Its data is gone with it.`)) return
    void action.run(async () => {
      await del(`/v1/volumes/${v.id}`)
      props.onChanged()
    })
  }
  const attached = v.attachments.length > 0 ? v.attachments.map((a) => a.sandbox_id).join(", ") : v.attached_to
  return (
    <tr>
      <th scope="row">
        {v.name}
        <div class="muted mono">{v.id}</div>
      </th>
      <td>{v.type}</td>
      <td>{v.size_gb} GiB</td>
      <td>
        <StateBadge state={v.state} />
      </td>
      <td class="mono">{attached ?? "—"}</td>
      <td>
        <When at={v.createdAt} />
      </td>
      <td>
        <button type="button" class="danger" onClick={remove} disabled={action.pending} aria-label={`Delete ${v.name}`}>
          Delete
        </button>
        <ErrorMessage error={action.error} />
      </td>
    </tr>
  )
}

export const Volumes = () => {
  const list = useResource(() => get<VolumeList>("/v1/volumes?limit=500"))
  const rows = list.data?.volumes ?? []
  return (
    <section>
      <PageTitle>Volumes</PageTitle>
      <CreateVolume onCreated={list.reload} />
      <ErrorMessage error={list.error} />
      <Table
        caption="Volumes"
        columns={["Name", "Type", "Size", "State", "Attached to", "Created", "Actions"]}
        empty={list.data !== undefined && rows.length === 0}
        loading={list.data === undefined && list.error === undefined}
      >
        {rows.map((v) => <Row key={v.id} volume={v} onChanged={list.reload} />)}
      </Table>
    </section>
  )
}
