/**
 * Usage and limits (docs/contract.md#billing): the usage object of GET /v1/billing/usage and
 * PUT /v1/billing/limits, and the limits body.
 *
 * - Amounts are integer micros (a millionth of the currency unit), at most 2^53 - 1.
 * - The period is the calendar month in UTC: `period_start` its first instant, `period_end` the
 *   first instant of the next month.
 * - `blocked`: a hard limit is set and the period's spend has reached it.
 * - Limits body: an omitted field keeps its value, `null` removes it; `{}` changes nothing.
 */
import { Schema } from "effect"
import { Timestamp } from "./Time.ts"

export const Micros = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }))

export const Usage = Schema.Struct({
  period_start: Timestamp,
  period_end: Timestamp,
  spend_micros: Micros,
  hard_limit_micros: Schema.NullOr(Micros),
  alert_micros: Schema.NullOr(Micros),
  blocked: Schema.Boolean
})
export type Usage = typeof Usage.Type

export class LimitsRequest extends Schema.Class<LimitsRequest>("LimitsRequest")({
  hard_limit_micros: Schema.optionalKey(Schema.NullOr(Micros)),
  alert_micros: Schema.optionalKey(Schema.NullOr(Micros))
}) {}
