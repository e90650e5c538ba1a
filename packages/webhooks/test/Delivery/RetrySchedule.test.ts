import { describe, expect, it } from "@effect/vitest"
import { RetryScheduleSetting } from "@svc/webhooks/Config"
import {
  afterFailedAttempt,
  DEFAULT_RETRY_SCHEDULE,
  DEFAULT_RETRY_SCHEDULE_TEXT,
  delayBeforeAttempt,
  formatRetrySchedule,
  MAX_ATTEMPTS,
  parseRetrySchedule
} from "@svc/webhooks/Delivery/RetrySchedule"
import { ConfigProvider, Effect, Result } from "effect"

describe("parseRetrySchedule", () => {
  it("parses the contract's default ladder", () => {
    expect(parseRetrySchedule(DEFAULT_RETRY_SCHEDULE_TEXT)).toEqual(
      Result.succeed([30_000, 120_000, 600_000, 3_600_000, 21_600_000])
    )
    expect(DEFAULT_RETRY_SCHEDULE).toEqual([30_000, 120_000, 600_000, 3_600_000, 21_600_000])
    expect(MAX_ATTEMPTS).toBe(6)
  })

  it("accepts every unit and spaces around entries", () => {
    expect(parseRetrySchedule("300ms, 300ms,300ms ,1s, 2m")).toEqual(Result.succeed([300, 300, 300, 1_000, 120_000]))
    expect(parseRetrySchedule("1ms,1s,1m,1h,24h")).toEqual(Result.succeed([1, 1_000, 60_000, 3_600_000, 86_400_000]))
  })

  it.each([
    ["", "expected 5"],
    ["30s,2m,10m,1h", "expected 5"],
    ["30s,2m,10m,1h,6h,12h", "expected 5"],
    ["30s,2m,10m,1h,", "\"\""],
    ["30,2m,10m,1h,6h", "\"30\""],
    ["30s,2d,10m,1h,6h", "\"2d\""],
    ["30s,2m,0s,1h,6h", "above zero"],
    ["30s,-2m,10m,1h,6h", "\"-2m\""],
    ["30s,1.5m,10m,1h,6h", "\"1.5m\""],
    ["30s,2M,10m,1h,6h", "\"2M\""],
    ["30s,2m,10m,1h,25h", "longer than 24h"],
    ["30s;2m;10m;1h;6h", "expected 5"],
    ["30 s,2m,10m,1h,6h", "\"30 s\""],
    ["0x1es,2m,10m,1h,6h", "\"0x1es\""],
    ["99999999999s,2m,10m,1h,6h", "\"99999999999s\""]
  ])("refuses %j", (input, message) => {
    const result = parseRetrySchedule(input)
    expect(Result.isFailure(result)).toBe(true)
    if (Result.isFailure(result)) expect(result.failure).toContain(message)
  })

  it("formats back to text that parses to the same schedule", () => {
    for (const text of [DEFAULT_RETRY_SCHEDULE_TEXT, "300ms,1500ms,90s,61m,24h"]) {
      const schedule = Result.getOrThrow(parseRetrySchedule(text))
      expect(parseRetrySchedule(formatRetrySchedule(schedule))).toEqual(Result.succeed(schedule))
    }
    expect(formatRetrySchedule(DEFAULT_RETRY_SCHEDULE)).toBe(DEFAULT_RETRY_SCHEDULE_TEXT)
  })
})

describe("SVC_WEBHOOK_RETRY_SCHEDULE", () => {
  const read = (env: Record<string, string>) => RetryScheduleSetting.parse(ConfigProvider.fromEnv({ env }))

  it.effect("defaults to the spec ladder, reads the variable, and fails on a bad value", () =>
    Effect.gen(function*() {
      expect(yield* read({})).toEqual(DEFAULT_RETRY_SCHEDULE)
      expect(yield* read({ SVC_WEBHOOK_RETRY_SCHEDULE: "300ms,300ms,300ms,300ms,300ms" })).toEqual([
        300,
        300,
        300,
        300,
        300
      ])
      const error = yield* Effect.flip(read({ SVC_WEBHOOK_RETRY_SCHEDULE: "30s,2m,10m,1h" }))
      expect(error._tag).toBe("ConfigError")
      expect(error.message).toContain("SVC_WEBHOOK_RETRY_SCHEDULE")
      expect(error.message).toContain("expected 5")
    }))
})

describe("the ladder", () => {
  const schedule = [100, 200, 300, 400, 500]
  it("waits nothing before attempt 1 and the schedule before attempts 2 to 6", () => {
    expect([1, 2, 3, 4, 5, 6].map((n) => delayBeforeAttempt(schedule, n))).toEqual([0, 100, 200, 300, 400, 500])
  })
  it("retries after failures 1 to 5 and dead-letters after the sixth", () => {
    expect([1, 2, 3, 4, 5, 6].map((n) => afterFailedAttempt(schedule, n))).toEqual([
      { _tag: "Retry", nextAttempt: 2, delayMs: 100 },
      { _tag: "Retry", nextAttempt: 3, delayMs: 200 },
      { _tag: "Retry", nextAttempt: 4, delayMs: 300 },
      { _tag: "Retry", nextAttempt: 5, delayMs: 400 },
      { _tag: "Retry", nextAttempt: 6, delayMs: 500 },
      { _tag: "DeadLetter" }
    ])
    expect(afterFailedAttempt(schedule, 7)).toEqual({ _tag: "DeadLetter" })
  })
})
