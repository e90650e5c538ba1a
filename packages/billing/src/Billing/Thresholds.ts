/**
 * Which usage events a period's standing calls for (docs/contract.md#billing, pure):
 *
 * - `org.usage_alert` once the spend reaches the alert value;
 * - `org.usage_limit_reached` once the spend reaches 50, 80, 90 and 100 % of the hard limit,
 *   in that order, `blocked` true when the spend is at or over the limit;
 * - each at most once per period: `sent` records what was announced. A limit (or alert value)
 *   changed so that the spend is below a threshold again re-arms it: it fires again when the
 *   spend reaches it. Removing a value re-arms everything it had.
 *
 * Amounts are integer micros as `bigint` (`spend * 100` of large amounts stays exact).
 */
import { USAGE_THRESHOLDS } from "@svc/domain/Events"

export type Pct = (typeof USAGE_THRESHOLDS)[number]
export const THRESHOLDS: ReadonlyArray<Pct> = USAGE_THRESHOLDS

export interface Standing {
  readonly spendMicros: bigint
  readonly hardLimitMicros: bigint | null
  readonly alertMicros: bigint | null
}

export interface Sent {
  readonly pcts: ReadonlyArray<Pct>
  readonly alert: boolean
}

export type Notice =
  | { readonly _tag: "Alert"; readonly spendMicros: bigint; readonly alertMicros: bigint }
  | {
    readonly _tag: "Limit"
    readonly pct: Pct
    readonly spendMicros: bigint
    readonly limitMicros: bigint
    readonly blocked: boolean
  }

export const NOTHING_SENT: Sent = { pcts: [], alert: false }

/** The spend is at or over `pct` % of `limit`. */
export const reached = (spendMicros: bigint, limitMicros: bigint, pct: number): boolean =>
  spendMicros * 100n >= BigInt(pct) * limitMicros

/** A hard limit is set and the spend has reached it. */
export const isBlocked = (spendMicros: bigint, hardLimitMicros: bigint | null): boolean =>
  hardLimitMicros !== null && spendMicros >= hardLimitMicros

/** What to announce now, and what counts as announced after. */
export const evaluate = (standing: Standing, sent: Sent): { readonly sent: Sent; readonly notices: Array<Notice> } => {
  const { alertMicros, hardLimitMicros: limit, spendMicros: spend } = standing
  const notices: Array<Notice> = []
  const alertReached = alertMicros !== null && spend >= alertMicros
  if (alertReached && !sent.alert) notices.push({ _tag: "Alert", spendMicros: spend, alertMicros: alertMicros! })
  const pcts: Array<Pct> = []
  for (const pct of THRESHOLDS) {
    if (limit === null || !reached(spend, limit, pct)) continue
    pcts.push(pct)
    if (!sent.pcts.includes(pct)) {
      notices.push({ _tag: "Limit", pct, spendMicros: spend, limitMicros: limit, blocked: isBlocked(spend, limit) })
    }
  }
  return { sent: { pcts, alert: alertReached }, notices }
}
