/**
 * API keys: the org's keys (revoked ones included), mint one (its token is shown this once and
 * never again: the API keeps only a hash), revoke one.
 */
import { useState } from "preact/hooks"
import { del, get, post, query } from "../api.ts"
import { ErrorMessage, Field, Form, Pager, PageTitle, ShownOnce, Table, useAction, useResource, When } from "../ui.tsx"
import type { ApiKeyPage, ApiKeyRow, CreatedApiKey } from "../wire.ts"

const Revoke = (props: { readonly row: ApiKeyRow; readonly onRevoked: () => void }) => {
  const action = useAction()
  const revoke = () => {
    if (!window.confirm(`Revoke the key ${props.row.name}? Programs using it stop working at once.`)) return
    void action.run(async () => {
      await del(`/v1/auth/api-keys/${props.row.id}`)
      props.onRevoked()
    })
  }
  return (
    <>
      <button type="button" class="danger" onClick={revoke} disabled={action.pending}>
        Revoke <span class="visually-hidden">{props.row.name}</span>
      </button>
      <ErrorMessage error={action.error} />
    </>
  )
}

export const Keys = () => {
  const [offset, setOffset] = useState(0)
  const keys = useResource(() => get<ApiKeyPage>(`/v1/auth/api-keys${query({ limit: 50, offset })}`), [offset])
  const [name, setName] = useState("")
  const [scopes, setScopes] = useState("")
  const [expires, setExpires] = useState("")
  const [minted, setMinted] = useState<CreatedApiKey | undefined>(undefined)
  const action = useAction()
  const mint = () =>
    action.run(async () => {
      const list = scopes.split(/[\s,]+/).filter(Boolean)
      const created = await post<CreatedApiKey>("/v1/auth/api-keys", {
        name,
        ...(list.length === 0 ? {} : { scopes: list }),
        ...(expires === "" ? {} : { expires_at: new Date(expires).toISOString() })
      })
      setMinted(created)
      setName("")
      setScopes("")
      setExpires("")
      await keys.reload()
    })
  const rows = keys.data?.keys ?? []
  return (
    <section>
      <PageTitle>API keys</PageTitle>
      {minted === undefined ? null : (
        <ShownOnce
          label={`Token of ${minted.name}`}
          value={minted.token}
          note="Copy it now: this is the only time it is shown. Send it as Authorization: Bearer <token>."
          onDone={() => setMinted(undefined)}
        />
      )}
      <details class="panel" open>
        <summary>Mint a key</summary>
        <Form label="Mint an API key" onSubmit={mint} class="form inline">
          <Field label="Key name" required value={name} onValue={setName} />
          <Field
            label="Scopes"
            value={scopes}
            onValue={setScopes}
            placeholder="sandboxes:write templates:read"
            hint="Separated by spaces; empty for full access (*)."
          />
          <Field label="Expires at" type="datetime-local" value={expires} onValue={setExpires} hint="Optional." />
          <button type="submit" disabled={action.pending}>Mint key</button>
        </Form>
        <ErrorMessage error={action.error} />
      </details>
      <ErrorMessage error={keys.error} />
      <Table
        caption="API keys"
        columns={["Name", "Prefix", "Scopes", "Created", "Last used", "Expires", "Status"]}
        empty={keys.data !== undefined && rows.length === 0}
        loading={keys.data === undefined && keys.error === undefined}
      >
        {rows.map((k) => (
          <tr key={k.id}>
            <th scope="row">{k.name}</th>
            <td class="mono">{k.prefix}…</td>
            <td class="mono">{k.scopes.join(" ")}</td>
            <td>
              <When at={k.createdAt} />
            </td>
            <td>
              <When at={k.lastUsedAt} />
            </td>
            <td>
              <When at={k.expiresAt} />
            </td>
            <td>
              {k.revokedAt === null
                ? <Revoke row={k} onRevoked={keys.reload} />
                : (
                  <span>
                    Revoked <When at={k.revokedAt} />
                  </span>
                )}
            </td>
          </tr>
        ))}
      </Table>
      {keys.data === undefined ? null : <Pager page={keys.data} label="API keys" onOffset={setOffset} />}
    </section>
  )
}
