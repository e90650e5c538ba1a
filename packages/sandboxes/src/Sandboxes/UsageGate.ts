/**
 * What a create or a start asks before it admits a sandbox: whether the org may run more
 * (docs/contract.md#billing: blocked at 100 % of its hard limit, 402 `usage_limit_reached`).
 * Declared here and implemented by @svc/billing (`Billing.gate`), so that this package does not
 * depend on billing (billing depends on this one: it stops a blocked org's sandboxes).
 *
 * `admit` runs inside the transaction that writes the sandbox, after the org's row is locked.
 */
import type * as Rows from "@svc/db/Rows"
import type * as Errors from "@svc/domain/Errors"
import { Context, Effect, Layer } from "effect"
import type { SqlClient } from "effect/sql"

export class UsageGate extends Context.Service<UsageGate, {
  readonly admit: (
    orgId: string
  ) => Effect.Effect<void, Errors.UsageLimitReached | Rows.QueryError, SqlClient.SqlClient>
}>()("@svc/sandboxes/UsageGate") {
  /** Admits everything (a deployment without usage limits). */
  static readonly unlimited = Layer.succeed(UsageGate, UsageGate.of({ admit: () => Effect.void }))
}
