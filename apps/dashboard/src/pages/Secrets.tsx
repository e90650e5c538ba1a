/**
 * Secrets: names and rules only (a value is write-only: no answer of the API holds one). Create
 * one, rotate its value, change its hosts, delete it.
 */
import { useState } from "preact/hooks"
import { del, get, patch, post, put } from "../api.ts"
import { ErrorMessage, Field, Form, PageTitle, Status, Table, useAction, useResource, When } from "../ui.tsx"
import type { Secret, SecretList } from "../wire.ts"

const hostsOf = (text: string) => text.split(/[\s,]+/).filter(Boolean)

const CreateSecret = (props: { readonly onCreated: () => void }) => {
  const [name, setName] = useState("")
  const [value, setValue] = useState("")
  const [hosts, setHosts] = useState("")
  const [headerName, setHeaderName] = useState("")
  const [headerFormat, setHeaderFormat] = useState("")
  const action = useAction()
  const submit = () =>
    action.run(async () => {
      await post<Secret>("/v1/secrets", {
        name,
        value,
        allowed_hosts: hostsOf(hosts),
        ...(headerName === "" ? {} : { header_name: headerName }),
        ...(headerFormat === "" ? {} : { header_format: headerFormat })
      })
      setName("")
      setValue("")
      setHosts("")
      props.onCreated()
    })
  return (
    <details class="panel">
      <summary>New secret</summary>
      <Form label="Create a secret" onSubmit={submit}>
        <Field label="Secret name" required value={name} onValue={setName} />
        <Field label="Value" type="password" autoComplete="off" required value={value} onValue={setValue} />
        <Field
          label="Allowed hosts"
          required
          value={hosts}
          onValue={setHosts}
          placeholder="api.openai.com *.example.com"
          hint="Separated by spaces: the egress proxy writes the secret only onto requests to these."
        />
        <Field label="Header name" value={headerName} onValue={setHeaderName} placeholder="Authorization" />
        <Field label="Header format" value={headerFormat} onValue={setHeaderFormat} placeholder="Bearer {value}" />
        <button type="submit" disabled={action.pending}>Create secret</button>
      </Form>
      <ErrorMessage error={action.error} />
    </details>
  )
}

const Row = (props: { readonly secret: Secret; readonly onChanged: () => void }) => {
  const s = props.secret
  const [editing, setEditing] = useState(false)
  const [value, setValue] = useState("")
  const [hosts, setHosts] = useState(s.allowed_hosts.join(" "))
  const [done, setDone] = useState<string | undefined>(undefined)
  const action = useAction()
  const rotate = () =>
    action.run(async () => {
      await put(`/v1/secrets/${s.id}/value`, { value })
      setValue("")
      setDone("Value rotated.")
      props.onChanged()
    })
  const saveHosts = () =>
    action.run(async () => {
      await patch(`/v1/secrets/${s.id}`, { allowed_hosts: hostsOf(hosts) })
      setDone("Hosts saved.")
      props.onChanged()
    })
  const remove = () => {
    if (!window.confirm(`Delete the secret ${s.name}? Every sandbox loses it.`)) return
    void action.run(async () => {
      await del(`/v1/secrets/${s.id}`)
      props.onChanged()
    })
  }
  return (
    <>
      <tr>
        <th scope="row">
          {s.name}
          <div class="muted mono">{s.id}</div>
        </th>
        <td class="mono">{s.allowed_hosts.join(" ")}</td>
        <td class="mono">{s.header_name}: {s.header_format}</td>
        <td>
          <When at={s.createdAt} />
        </td>
        <td>
          <When at={s.rotatedAt} />
        </td>
        <td>
          <div class="actions">
            <button type="button" aria-expanded={editing} onClick={() => setEditing(!editing)}>
              Edit <span class="visually-hidden">{s.name}</span>
            </button>
            <button type="button" class="danger" onClick={remove} aria-label={`Delete ${s.name}`}>Delete</button>
          </div>
          <ErrorMessage error={action.error} />
          {done === undefined ? null : <Status>{done}</Status>}
        </td>
      </tr>
      {editing
        ? (
          <tr>
            <td colSpan={6}>
              <Form label={`Rotate ${s.name}`} onSubmit={rotate} class="form inline">
                <Field label="New value" type="password" autoComplete="off" required value={value} onValue={setValue} />
                <button type="submit" disabled={action.pending}>Rotate</button>
              </Form>
              <Form label={`Hosts of ${s.name}`} onSubmit={saveHosts} class="form inline">
                <Field label="Allowed hosts" required value={hosts} onValue={setHosts} />
                <button type="submit" disabled={action.pending}>Save hosts</button>
              </Form>
            </td>
          </tr>
        )
        : null}
    </>
  )
}

export const Secrets = () => {
  const list = useResource(() => get<SecretList>("/v1/secrets?limit=500"))
  const rows = list.data?.secrets ?? []
  return (
    <section>
      <PageTitle>Secrets</PageTitle>
      <CreateSecret onCreated={list.reload} />
      <ErrorMessage error={list.error} />
      <Table
        caption="Secrets"
        columns={["Name", "Allowed hosts", "Header", "Created", "Rotated", "Actions"]}
        empty={list.data !== undefined && rows.length === 0}
        loading={list.data === undefined && list.error === undefined}
      >
        {rows.map((s) => <Row key={s.id} secret={s} onChanged={list.reload} />)}
      </Table>
    </section>
  )
}
