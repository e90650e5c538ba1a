/**
 * Adding spend to an org's period and announcing what it crossed, in the caller's transaction:
 * the period row is locked, the spend added, the thresholds evaluated (`Thresholds.ts`), their
 * events written to the outbox, and what was announced saved, all in one commit. Whoever meters
 * or changes a limit next sees what was announced, so each event is written once, however many
 * meters run and whichever of them dies mid-way (its transaction rolls back whole).
 */
import type { OrgUsageAlertData, OrgUsageLimitReachedData } from "@svc/domain/Events"
import * as Outbox from "@svc/events/Outbox"
import { Effect } from "effect"
import { toMicros } from "./Pricing.ts"
import * as Store from "./Store.ts"
import { evaluate, type Notice } from "./Thresholds.ts"

const toEvent = (orgId: string, notice: Notice): Outbox.DomainEvent =>
  notice._tag === "Alert"
    ? {
      event: "org.usage_alert",
      orgId,
      data: {
        spend_micros: Number(notice.spendMicros),
        alert_micros: Number(notice.alertMicros)
      } satisfies typeof OrgUsageAlertData.Encoded
    }
    : {
      event: "org.usage_limit_reached",
      orgId,
      data: {
        pct: notice.pct,
        spend_micros: Number(notice.spendMicros),
        limit_micros: Number(notice.limitMicros),
        blocked: notice.blocked
      } satisfies typeof OrgUsageLimitReachedData.Encoded
    }

/**
 * Adds `units` to the org's spend in the period starting at `periodStart` and announces the
 * thresholds now reached (`units` 0: only re-evaluates, after a limit changed). Must run in a
 * transaction.
 */
export const charge = Effect.fnUntraced(function*(orgId: string, periodStart: number, units: bigint) {
  const row = yield* Store.lockPeriod(orgId, periodStart)
  // Read after the period lock: a limit changed concurrently committed before it was released.
  const limits = yield* Store.readLimits(orgId)
  const spendUnits = row.spendUnits + units
  const result = evaluate({ spendMicros: toMicros(spendUnits), ...limits }, row.sent)
  yield* Outbox.appendEvents(result.notices.map((n) => toEvent(orgId, n))).pipe(
    Effect.catchTag("InvalidOutboxMessage", Effect.die)
  )
  yield* Store.savePeriod(orgId, periodStart, { spendUnits, sent: result.sent })
  return { spendUnits, notices: result.notices }
})
