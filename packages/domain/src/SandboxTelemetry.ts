/**
 * A sandbox's metrics and log as the API shows them (docs/contract.md#sandbox-logs-and-metrics):
 * the sample's fields, and the `since` of `GET /v1/sandboxes/{id}/logs|metrics`.
 */
import { Schema } from "effect"
import { TimestampText } from "./Text.ts"

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

/** One sample of a running sandbox (every 5 s, kept 24 h). */
export const MetricSample = Schema.Struct({
  /** ISO 8601, the host's clock. */
  ts: TimestampText,
  /** CPU time used since the previous sample over the time between them, in percent of one core (200: two cores busy). */
  cpu_pct: Schema.Number.check(Schema.isGreaterThanOrEqualTo(0)),
  /** Memory in use (without the inactive file cache). */
  mem_bytes: Count,
  mem_limit_bytes: Count,
  /** What its disk holds on the host. */
  disk_bytes: Count,
  disk_limit_bytes: Count,
  pids: Count,
  /** Bytes received and sent over its network link since the run started. */
  net_rx_bytes: Count,
  net_tx_bytes: Count
})
export type MetricSample = typeof MetricSample.Type

/**
 * The most samples one answer holds: two days at the default interval (a sandbox keeps 24 h per
 * host it ran on; a longer history is not kept).
 */
export const MAX_METRIC_SAMPLES = 2 * 17_280 + 2_000

export const MetricSamples = Schema.Struct({
  samples: Schema.Array(MetricSample).check(Schema.isMaxLength(MAX_METRIC_SAMPLES))
})
export type MetricSamples = typeof MetricSamples.Type

const RELATIVE = /^(\d{1,9})(s|m|h|d)$/
const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const
const ISO = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/

/**
 * `since`: an ISO 8601 time (`2026-01-02T03:04:05Z`, or a date) or a duration back from `now`
 * (`30s`, `15m`, `2h`, `1d`); undefined for anything else.
 */
export const parseSince = (text: string, now: number): Date | undefined => {
  const relative = RELATIVE.exec(text)
  if (relative !== null) return new Date(now - Number(relative[1]) * UNIT_MS[relative[2] as keyof typeof UNIT_MS])
  if (!ISO.test(text)) return undefined
  const ms = Date.parse(text)
  return Number.isNaN(ms) ? undefined : new Date(ms)
}
