/**
 * Timestamps in JSON (docs/contract.md#conventions): ISO 8601 UTC with milliseconds,
 * `2026-11-22T01:02:03.456Z`; `null` where unset.
 *
 * `Timestamp` decodes a strict ISO 8601 date-time (seconds required, any fraction, `Z` or a
 * `+hh:mm` offset) to a `DateTime.Utc` and always encodes with milliseconds and `Z`.
 * Database rows arrive as `Date`: decode them with `Schema.DateTimeUtcFromDate`.
 */
import { DateTime, Schema, SchemaTransformation } from "effect"
import { enforcedMax } from "./Text.ts"

const ISO_8601 =
  /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/

/** Formats a time as `YYYY-MM-DDTHH:mm:ss.sssZ`. */
export const formatTimestamp = (time: DateTime.DateTime | number): string =>
  new Date(typeof time === "number" ? time : DateTime.toEpochMillis(time)).toISOString()

/** Date.parse rolls 2026-02-31 over to March: check the calendar day ourselves. */
const isValidIso = (s: string): boolean => {
  if (!ISO_8601.test(s) || Number.isNaN(Date.parse(s))) return false
  const year = Number(s.slice(0, 4))
  const month = Number(s.slice(5, 7))
  const day = Number(s.slice(8, 10))
  return day <= new Date(Date.UTC(year, month, 0)).getUTCDate()
}

const IsoString = Schema.String.check(
  // The longest form: nine digits of fraction and an offset.
  enforcedMax(35),
  Schema.makeFilter((s: string) => isValidIso(s) || "an ISO 8601 timestamp", {
    expected: "an ISO 8601 timestamp such as 2026-11-22T01:02:03.456Z"
  })
)

export const Timestamp = IsoString.pipe(
  Schema.decodeTo(
    Schema.DateTimeUtc,
    SchemaTransformation.transform({
      decode: (s: string) => DateTime.makeUnsafe(Date.parse(s)),
      encode: (utc: DateTime.Utc) => formatTimestamp(utc)
    })
  )
).annotate({ description: "ISO 8601 UTC timestamp with milliseconds" })
export type Timestamp = typeof Timestamp.Type

/** A timestamp that is `null` where unset. */
export const NullableTimestamp = Schema.NullOr(Timestamp)
