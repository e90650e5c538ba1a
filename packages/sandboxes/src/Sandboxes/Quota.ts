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

/** Locks the org's row until the transaction ends (again in the same transaction: no-op). */
export const lockOrg = Effect.fnUntraced(function*(orgId: string) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`SELECT 1 FROM orgs WHERE id = ${orgId} FOR NO KEY UPDATE`
})

/**
 * Refuses the change when it would take the org past a quota: a create (one more sandbox, one
 * more running) or a start (one more running). Must run inside the transaction that then writes
 * the sandbox, after its `lockOrg` (one round trip each; taking the lock again here cost one more).
 */
export const check = Effect.fnUntraced(function*(
  orgId: string,
  quotas: Quotas,
  change: "create" | "start",
  /** An expression evaluated once by the same statement (a lock the caller takes next anyway). */
  alongside?: Statement.Fragment
) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* counts(sql`
    SELECT count(*)::int AS total,
           count(*) FILTER (WHERE state = ANY(${[...RUNNING_STATES]}::text[]))::int AS running
           ${alongside === undefined ? sql`` : sql`, ${alongside} AS alongside`}
    FROM sandboxes WHERE org_id = ${orgId} AND state NOT IN ('deleting', 'deleted')`)
  const { total, running } = rows[0] ?? { total: 0, running: 0 }
  if (change === "create" && total >= quotas.maxSandboxes) {
    return yield* new Errors.QuotaExceeded({
      error:
        `The org has reached its quota of ${quotas.maxSandboxes} sandboxes (SVC_ORG_MAX_SANDBOXES); delete one first`,
      quota: "sandboxes",
      limit: quotas.maxSandboxes
    })
  }
  if (running >= quotas.maxRunning) {
    return yield* new Errors.QuotaExceeded({
      error:
        `The org has reached its quota of ${quotas.maxRunning} running sandboxes (SVC_ORG_MAX_RUNNING_SANDBOXES); ` +
        "stop or delete one first",
      quota: "running_sandboxes",
      limit: quotas.maxRunning
    })
  }
})
