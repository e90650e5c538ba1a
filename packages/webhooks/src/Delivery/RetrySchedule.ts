/**
 * The delivery retry ladder (docs/contract.md#retries): attempt 1 at once, then the five waits of
 * `SVC_WEBHOOK_RETRY_SCHEDULE` (read in ../Config.ts) before attempts 2 to 6 (default
 * `30s,2m,10m,1h,6h`; tests use e.g. `300ms,300ms,300ms,300ms,300ms` to run the whole ladder in
 * seconds). Each wait is a duration in the platform's format (@svc/config).
 */
import { formatDuration, parseDuration } from "@svc/config/Env"
import { MAX_ATTEMPTS } from "@svc/domain/Webhook"
import { Duration, Effect, Result, Schema, SchemaIssue, SchemaTransformation } from "effect"

export { MAX_ATTEMPTS }

/** The waits before attempts 2..6, in milliseconds: always five positive integers. */
export type RetrySchedule = ReadonlyArray<number>

export const DEFAULT_RETRY_SCHEDULE_TEXT = "30s,2m,10m,1h,6h"
export const DEFAULT_RETRY_SCHEDULE: RetrySchedule = [30_000, 120_000, 600_000, 3_600_000, 21_600_000]

/** One wait above a day is surely a typo (and would overflow Node timers past ~24.8 days). */
export const MAX_WAIT_MS = 86_400_000

/**
 * Parses `30s,2m,10m,1h,6h`: exactly five comma-separated durations (a whole number and a unit,
 * ms, s, m, h or d), each above zero and at most a day. Spaces around entries are allowed.
 */
export const parseRetrySchedule = (input: string): Result.Result<RetrySchedule, string> => {
  const entries = input.split(",").map((entry) => entry.trim())
  if (entries.length !== MAX_ATTEMPTS - 1) {
    return Result.fail(`expected ${MAX_ATTEMPTS - 1} comma-separated durations, got ${entries.length}`)
  }
  const waits: Array<number> = []
  for (const entry of entries) {
    const parsed = parseDuration(entry)
    if (Result.isFailure(parsed)) return Result.fail(parsed.failure)
    const ms = Duration.toMillis(parsed.success)
    if (ms <= 0) return Result.fail(`"${entry}" must be above zero`)
    if (ms > MAX_WAIT_MS) return Result.fail(`"${entry}" is longer than 24h`)
    waits.push(ms)
  }
  return Result.succeed(waits)
}

export const formatRetrySchedule = (schedule: RetrySchedule): string =>
  schedule.map((ms) => formatDuration(Duration.millis(ms))).join(",")

/** Text ⇄ schedule; a bad value is a schema issue saying what is wrong. */
export const RetryScheduleFromString = Schema.String.pipe(
  Schema.decodeTo(
    Schema.Array(Schema.Int),
    SchemaTransformation.transformEffect({
      decode: (input: string, options) =>
        Result.match(parseRetrySchedule(input), {
          onSuccess: (schedule) => Effect.succeed(schedule),
          onFailure: (message) =>
            Effect.fail(
              new SchemaIssue.InvalidValue({ message: `SVC_WEBHOOK_RETRY_SCHEDULE: ${message}` }, input, options)
            )
        }),
      encode: (schedule: RetrySchedule) => Effect.succeed(formatRetrySchedule(schedule))
    })
  )
)

/** Wait before attempt `attempt` (1-based): 0 for the first, the schedule for 2..6. */
export const delayBeforeAttempt = (schedule: RetrySchedule, attempt: number): number =>
  attempt <= 1 ? 0 : schedule[Math.min(attempt, MAX_ATTEMPTS) - 2]!

/** What follows a failed attempt number `attempt` (1-based): another try after a wait, or the end. */
export type AfterFailure =
  | { readonly _tag: "Retry"; readonly nextAttempt: number; readonly delayMs: number }
  | { readonly _tag: "DeadLetter" }

export const afterFailedAttempt = (schedule: RetrySchedule, attempt: number): AfterFailure =>
  attempt >= MAX_ATTEMPTS
    ? { _tag: "DeadLetter" }
    : { _tag: "Retry", nextAttempt: attempt + 1, delayMs: delayBeforeAttempt(schedule, attempt + 1) }
