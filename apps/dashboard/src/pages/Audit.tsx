/** The audit log: who did what to the account (keys, sign-ins, secrets, limits), newest first. */
import { useState } from "preact/hooks"
import { get, query } from "../api.ts"
import { ErrorMessage, Pager, PageTitle, Select, Table, useResource, When } from "../ui.tsx"
import type { AuditAction, AuditPage } from "../wire.ts"

/** Every action the API records (the type fails to check if the API adds or drops one). */
const ACTIONS = {
  "apikey.created": true,
  "apikey.revoked": true,
  "org.created": true,
  "org.updated": true,
  "auth.signed_up": true,
  "auth.signed_in": true,
  "auth.sign_in_failed": true,
  "auth.signed_out": true,
  "secret.created": true,
  "secret.rotated": true,
  "secret.updated": true,
  "secret.deleted": true,
  "billing.limits_updated": true,
  "app.created": true,
  "app.updated": true,
  "app.deleted": true
} satisfies Record<AuditAction, true>

export const Audit = () => {
  const [action, setAction] = useState("")
  const [offset, setOffset] = useState(0)
  const log = useResource(
    () => get<AuditPage>(`/v1/audit${query({ action, limit: 50, offset })}`),
    [action, offset]
  )
  const rows = log.data?.entries ?? []
  return (
    <section>
      <PageTitle>Audit log</PageTitle>
      <div class="toolbar">
        <Select
          label="Action"
          value={action}
          onValue={(value) => {
            setAction(value)
            setOffset(0)
          }}
          options={[["", "All actions"], ...Object.keys(ACTIONS).map((a) => [a, a] as const)]}
        />
        <button type="button" onClick={log.reload}>Refresh</button>
      </div>
      <ErrorMessage error={log.error} />
      <Table
        caption="Audit entries"
        columns={["When", "Action", "Actor", "Target", "Address", "User agent"]}
        empty={log.data !== undefined && rows.length === 0}
        loading={log.data === undefined && log.error === undefined}
        emptyText="No entries."
      >
        {rows.map((e) => (
          <tr key={e.id}>
            <td>
              <When at={e.createdAt} />
            </td>
            <th scope="row" class="mono">{e.action}</th>
            <td class="mono">{e.actor.type} {e.actor.id}</td>
            <td class="mono">{e.target_id ?? "—"}</td>
            <td class="mono">{e.ip ?? "—"}</td>
            <td class="ellipsis" title={e.user_agent ?? undefined}>{e.user_agent ?? "—"}</td>
          </tr>
        ))}
      </Table>
      {log.data === undefined ? null : <Pager page={log.data} label="Audit log" onOffset={setOffset} />}
    </section>
  )
}
