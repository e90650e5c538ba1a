/**
 * What a create or a start asks before it admits a sandbox: whether the org may run more
 * (docs/contract.md#billing: blocked at 100 % of its hard limit, 402 `usage_limit_reached`).
 * Declared here and implemented by @svc/billing (`Billing.gate`), so that this package does not
 * depend on billing (billing depends on this one: it stops a blocked org's sandboxes).
 *
 * `admit` runs inside the transaction that writes the sandbox, after the org's row is locked.
 * `columns` asks the same as expressions for a statement the caller runs there anyway (the
 * create's quota count: one round trip less), `decide` answers from that statement's row.
 */
import type * as Rows from "@svc/db/Rows"
import type * as Errors from "@svc/domain/Errors"
import { Context, Effect, Layer } from "effect"
import type { SqlClient, Statement } from "effect/sql"

export class UsageGate extends Context.Service<UsageGate, {
  readonly admit: (
    orgId: string
  ) => Effect.Effect<void, Errors.UsageLimitReached | Rows.QueryError, SqlClient.SqlClient>
  /** `, <expression> AS <name>` items for a SELECT list (none: nothing to ask). */
  readonly columns: (sql: SqlClient.SqlClient, orgId: string, now: number) => Statement.Fragment
  /** The answer from the row of the statement that held `columns`. */
  readonly decide: (
    row: { readonly [column: string]: unknown },
    now: number
  ) => Effect.Effect<void, Errors.UsageLimitReached | Rows.QueryError>
}>()("@svc/sandboxes/Sandboxes/UsageGate") {
  /** Admits everything (a deployment without usage limits). */
  static readonly unlimited = Layer.succeed(
    UsageGate,
    UsageGate.of({ admit: () => Effect.void, columns: (sql) => sql``, decide: () => Effect.void })
  )
}
