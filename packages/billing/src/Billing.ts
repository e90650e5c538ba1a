/**
 * Usage and limits as the API sees them (docs/contract.md#billing): the current period's figures,
 * the limits, and the gate that refuses a blocked org's creates and starts (402). The metering
 * itself runs in the runtime role (`Billing/Meter.ts`).
 *
 * - The period is the calendar month (UTC) of the API's clock; its spend is what the meter has
 *   charged so far (at most one `SVC_METER_INTERVAL` behind).
 * - `blocked` is not stored: it is "a hard limit is set and the period's spend reached it", so
 *   raising the limit, removing it or a new period unblock at once.
 * - `setLimits` re-evaluates the thresholds in its transaction (`Ledger.charge` with nothing to
 *   add): a limit lowered to the spend announces what it now reaches (and blocks); one raised
 *   above the spend re-arms the thresholds above it. Audit entry `billing.limits_updated`.
 */
import { Audit, type AuditContext } from "@svc/auth/Audit"
import type * as Rows from "@svc/db/Rows"
import type { LimitsRequest, Usage } from "@svc/domain/Billing"
import * as Errors from "@svc/domain/Errors"
import type { OrgId } from "@svc/domain/Ids"
import { wakeIfPresent } from "@svc/events/Relay"
import { UsageGate } from "@svc/sandboxes/Sandboxes/UsageGate"
import { Clock, Context, DateTime, Effect, Layer } from "effect"
import { SqlClient, type SqlError } from "effect/sql"
import * as Ledger from "./Billing/Ledger.ts"
import { periodOf } from "./Billing/Period.ts"
import { toMicros } from "./Billing/Pricing.ts"
import * as Store from "./Billing/Store.ts"
import { isBlocked } from "./Billing/Thresholds.ts"

const shown = (micros: bigint): number =>
  Number(micros > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : micros)
const shownOrNull = (micros: bigint | null) => (micros === null ? null : shown(micros))

const usageOf = (periodStart: number, spendUnits: bigint, limits: Store.Limits): Usage => {
  const spend = toMicros(spendUnits)
  const period = periodOf(periodStart)
  return {
    period_start: DateTime.makeUnsafe(period.start),
    period_end: DateTime.makeUnsafe(period.end),
    spend_micros: shown(spend),
    hard_limit_micros: shownOrNull(limits.hardLimitMicros),
    alert_micros: shownOrNull(limits.alertMicros),
    blocked: isBlocked(spend, limits.hardLimitMicros)
  }
}

/** The gate's answer from the period's spend and the hard limit. */
const judgeGate = (gate: { readonly spendUnits: bigint; readonly hardLimitMicros: bigint | null }, now: number) => {
  const spend = toMicros(gate.spendUnits)
  if (!isBlocked(spend, gate.hardLimitMicros)) return Effect.void
  return Effect.fail(
    new Errors.UsageLimitReached({
      error: `The org has reached its hard usage limit for this period (spend ${spend} of ${gate
        .hardLimitMicros!} micros, until ${
        new Date(periodOf(now).end).toISOString()
      }); raise it with PUT /v1/billing/limits`
    })
  )
}

export class Billing extends Context.Service<Billing, {
  readonly usage: (orgId: OrgId) => Effect.Effect<Usage, Rows.QueryError>
  readonly setLimits: (
    orgId: OrgId,
    request: LimitsRequest,
    context: AuditContext
  ) => Effect.Effect<Usage, Rows.QueryError | SqlError.SqlError>
}>()("@svc/billing/Billing") {
  static readonly make = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const audit = yield* Audit

    const usage = Effect.fn("Billing.usage")(function*(orgId: OrgId) {
      const now = yield* Clock.currentTimeMillis
      const { start } = periodOf(now)
      const row = yield* Store.readPeriod(orgId, start)
      return usageOf(start, row.spendUnits, yield* Store.readLimits(orgId))
    })

    const setLimits = Effect.fn("Billing.setLimits")(function*(
      orgId: OrgId,
      request: LimitsRequest,
      context: AuditContext
    ) {
      const now = yield* Clock.currentTimeMillis
      const { start } = periodOf(now)
      const result = yield* sql.withTransaction(Effect.gen(function*() {
        // The period row first, as the meter locks it: the two never wait on each other in turn.
        yield* Store.lockPeriod(orgId, start)
        const before = yield* Store.readLimits(orgId)
        const limits: Store.Limits = {
          hardLimitMicros: request.hard_limit_micros === undefined
            ? before.hardLimitMicros
            : request.hard_limit_micros === null
            ? null
            : BigInt(request.hard_limit_micros),
          alertMicros: request.alert_micros === undefined
            ? before.alertMicros
            : request.alert_micros === null
            ? null
            : BigInt(request.alert_micros)
        }
        yield* Store.writeLimits(orgId, limits)
        const { spendUnits } = yield* Ledger.charge(orgId, start, 0n)
        yield* audit.record(orgId, "billing.limits_updated", orgId, context)
        return usageOf(start, spendUnits, limits)
      }))
      yield* wakeIfPresent
      return result
    })

    const withSql = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
      Effect.provideService(effect, SqlClient.SqlClient, sql)
    return Billing.of({
      usage: (orgId) => withSql(usage(orgId)),
      setLimits: (orgId, request, context) => withSql(setLimits(orgId, request, context))
    })
  })

  /** Needs `SqlClient` and `Audit`. */
  static readonly layer = Layer.effect(Billing, Billing.make)

  /**
   * The sandboxes' `UsageGate`: a blocked org's create or start is 402 `usage_limit_reached`.
   * Runs in the sandbox's transaction, under the org's row lock.
   */
  static readonly gate = Layer.succeed(
    UsageGate,
    UsageGate.of({
      admit: Effect.fnUntraced(function*(orgId: string) {
        const now = yield* Clock.currentTimeMillis
        return yield* judgeGate(yield* Store.readGate(orgId, periodOf(now).start), now)
      }),
      columns: (sql, orgId, now) => Store.gateColumns(sql, orgId, periodOf(now).start),
      decide: (row, now) => Effect.flatMap(Store.fromGateRow(row), (gate) => judgeGate(gate, now))
    })
  )
}
