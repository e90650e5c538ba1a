/**
 * Per-org sandbox quotas (docs/contract.md#errors: 429 `quota_exceeded`, the message naming the
 * quota and its value; read in ../Config.ts), checked when a sandbox is created and when one is started:
 * - `SVC_ORG_MAX_SANDBOXES` [100]: sandboxes that exist (every state but `deleting` and
 *   `deleted`; stopped and failed ones keep their disk);
 * - `SVC_ORG_MAX_RUNNING_SANDBOXES` [20]: sandboxes that hold or are about to hold CPU and memory
 *   (`pending`, `starting`, `running`, `stopping`).
 *
 * The check runs in the transaction that inserts (or starts) the sandbox, under a lock of the
 * org's row (`FOR NO KEY UPDATE`: it does not block the foreign-key checks of other inserts,
 * only other quota checks of the same org), so N concurrent creates with room for one admit
 * exactly one: the next counts after the first committed.
 */
import * as Rows from "@svc/db/Rows"
import * as Errors from "@svc/domain/Errors"
import { Effect, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"

export interface Quotas {
  readonly maxSandboxes: number
  readonly maxRunning: number
}

/** The states that count against `SVC_ORG_MAX_RUNNING_SANDBOXES`. */
export const RUNNING_STATES = ["pending", "starting", "running", "stopping"] as const

const counts = Rows.decoder("Quota.check", Schema.Struct({ total: Schema.Int, running: Schema.Int }))

/**
 * Locks the org's row until the transaction ends (again in the same transaction: no-op).
 * `alongside` (`, <expression> AS <name>` items, such as another lock) is evaluated by the same
 * statement once the row is locked (the materialized CTE locks it first), so every transaction
 * that takes both takes them in this order; the row of those items is returned.
 */
export const lockOrg = Effect.fnUntraced(function*(orgId: string, alongside?: Statement.Fragment) {
  const sql = yield* SqlClient.SqlClient
  if (alongside === undefined) {
    yield* sql`SELECT 1 FROM orgs WHERE id = ${orgId} FOR NO KEY UPDATE`
    return {}
  }
  const rows = yield* sql<{ readonly [column: string]: unknown }>`
    WITH org AS MATERIALIZED (SELECT 1 FROM orgs WHERE id = ${orgId} FOR NO KEY UPDATE)
    SELECT 1 AS locked ${alongside} FROM org`
  return rows[0] ?? {}
})

/**
 * The org's counts, with `alongside` (`, <expression> AS <name>` items) evaluated by the same
 * statement: the whole row is returned. Runs after `lockOrg`, in its transaction.
 */
export const count = Effect.fnUntraced(function*(orgId: string, alongside?: Statement.Fragment) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ readonly [column: string]: unknown }>`
    SELECT count(*)::int AS total,
           count(*) FILTER (WHERE state = ANY(${[...RUNNING_STATES]}::text[]))::int AS running
           ${alongside ?? sql``}
    FROM sandboxes WHERE org_id = ${orgId} AND state NOT IN ('deleting', 'deleted')`
  const [counted] = yield* counts(Effect.succeed(rows))
  return { total: counted?.total ?? 0, running: counted?.running ?? 0, row: rows[0] ?? {} }
})

/**
 * Refuses the change when it would take the org past a quota: a create (one more sandbox, one
 * more running) or a start (one more running).
 */
export const judge = (
  counted: { readonly total: number; readonly running: number },
  quotas: Quotas,
  change: "create" | "start"
): Effect.Effect<void, Errors.QuotaExceeded> => {
  if (change === "create" && counted.total >= quotas.maxSandboxes) {
    return Effect.fail(
      new Errors.QuotaExceeded({
        error:
          `The org has reached its quota of ${quotas.maxSandboxes} sandboxes (SVC_ORG_MAX_SANDBOXES); delete one first`,
        quota: "sandboxes",
        limit: quotas.maxSandboxes
      })
    )
  }
  if (counted.running >= quotas.maxRunning) {
    return Effect.fail(
      new Errors.QuotaExceeded({
        error:
          `The org has reached its quota of ${quotas.maxRunning} running sandboxes (SVC_ORG_MAX_RUNNING_SANDBOXES); ` +
          "stop or delete one first",
        quota: "running_sandboxes",
        limit: quotas.maxRunning
      })
    )
  }
  return Effect.void
}

/**
 * `count` then `judge`. Must run inside the transaction that then writes the sandbox, after its
 * `lockOrg` (one round trip each; taking the lock again here cost one more).
 */
export const check = (orgId: string, quotas: Quotas, change: "create" | "start") =>
  Effect.flatMap(count(orgId), (counted) => judge(counted, quotas, change))
