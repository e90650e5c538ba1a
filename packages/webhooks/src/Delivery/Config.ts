/**
 * Configuration of webhook delivery (fan-out and dispatchers). Durations use the grammar of
 * `SVC_WEBHOOK_RETRY_SCHEDULE`: a whole number and a unit, `300ms`, `30s`, `2m`, `1h`.
 *
 * | variable | default | meaning |
 * |---|---|---|
 * | `SVC_WEBHOOK_RETRY_SCHEDULE` | `30s,2m,10m,1h,6h` | waits before attempts 2 to 6 (RetrySchedule.ts) |
 * | `SVC_WEBHOOK_ATTEMPT_TIMEOUT` | `5s` | one attempt's deadline (docs/contract.md#retries: 2xx within 5 s) |
 * | `SVC_WEBHOOK_ACK_WAIT` | `30s` | how long a job held by a dispatcher that stopped answering stays invisible |
 * | `SVC_WEBHOOK_CONCURRENCY` | `16` | attempts in flight per webhook per dispatcher process |
 * | `SVC_WEBHOOK_MAX_ACK_PENDING` | `1000` | per webhook: jobs in flight or waiting for their retry |
 * | `SVC_WEBHOOK_DISCOVERY_INTERVAL` | `5s` | safety-net rescan of webhooks (changes also wake it at once) |
 * | `SVC_WEBHOOK_RETENTION_DAYS` | `30` | finished deliveries (and their attempts) are deleted after this many days |
 */
import { Config, Effect, Result, Schema, SchemaIssue, SchemaTransformation } from "effect"
import { type RetrySchedule, RetryScheduleConfig } from "./RetrySchedule.ts"

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const
const DURATION = /^(\d{1,9})(ms|s|m|h)$/

/** `300ms`, `30s`, `2m`, `1h` → milliseconds; above zero and at most a day. */
export const parseDuration = (input: string): Result.Result<number, string> => {
  const match = DURATION.exec(input.trim())
  if (match === null) return Result.fail(`"${input}" is not a duration such as 300ms, 30s, 2m or 1h`)
  const ms = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS]
  if (ms <= 0) return Result.fail(`"${input}" must be above zero`)
  if (ms > 86_400_000) return Result.fail(`"${input}" is longer than 24h`)
  return Result.succeed(ms)
}

const DurationMs = (name: string) =>
  Schema.String.pipe(
    Schema.decodeTo(
      Schema.Int,
      SchemaTransformation.transformEffect({
        decode: (input: string, options) =>
          Result.match(parseDuration(input), {
            onSuccess: (ms) => Effect.succeed(ms),
            onFailure: (message) => Effect.fail(new SchemaIssue.InvalidValue({ message: `${name}: ${message}` }, input, options))
          }),
        encode: (ms: number) => Effect.succeed(`${ms}ms`)
      })
    )
  )

const durationConfig = (name: string, defaultMs: number) =>
  Config.schema(DurationMs(name), name).pipe(Config.withDefault(defaultMs))

const countConfig = (name: string, defaultValue: number, maximum: number) =>
  Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum })), name).pipe(Config.withDefault(defaultValue))

export interface DispatchSettings {
  readonly schedule: RetrySchedule
  readonly attemptTimeoutMs: number
  readonly ackWaitMs: number
  readonly concurrency: number
  readonly maxAckPending: number
  readonly discoveryIntervalMs: number
  readonly retentionDays: number
}

export const DEFAULT_DISPATCH_SETTINGS: Omit<DispatchSettings, "schedule"> = {
  attemptTimeoutMs: 5_000,
  ackWaitMs: 30_000,
  concurrency: 16,
  maxAckPending: 1_000,
  discoveryIntervalMs: 5_000,
  retentionDays: 30
}

/** Every setting from the environment; a bad value is a ConfigError naming the variable. */
export const DispatchConfig: Config.Config<DispatchSettings> = Config.all({
  schedule: RetryScheduleConfig,
  attemptTimeoutMs: durationConfig("SVC_WEBHOOK_ATTEMPT_TIMEOUT", DEFAULT_DISPATCH_SETTINGS.attemptTimeoutMs),
  ackWaitMs: durationConfig("SVC_WEBHOOK_ACK_WAIT", DEFAULT_DISPATCH_SETTINGS.ackWaitMs),
  concurrency: countConfig("SVC_WEBHOOK_CONCURRENCY", DEFAULT_DISPATCH_SETTINGS.concurrency, 1_000),
  maxAckPending: countConfig("SVC_WEBHOOK_MAX_ACK_PENDING", DEFAULT_DISPATCH_SETTINGS.maxAckPending, 1_000_000),
  discoveryIntervalMs: durationConfig("SVC_WEBHOOK_DISCOVERY_INTERVAL", DEFAULT_DISPATCH_SETTINGS.discoveryIntervalMs),
  retentionDays: countConfig("SVC_WEBHOOK_RETENTION_DAYS", DEFAULT_DISPATCH_SETTINGS.retentionDays, 3_650)
})
