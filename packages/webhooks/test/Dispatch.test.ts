/**
 * The delivery state machine without I/O (Dispatch.ts), the nak delays of the default ladder,
 * and the dispatcher's configuration parsing.
 */
import { describe, expect, it } from "@effect/vitest"
import { afterAttempt, type ClaimState, decideClaim, decideLostJob } from "@svc/webhooks/Dispatch"
import { DispatchConfig, type DispatchSettings, parseDuration } from "@svc/webhooks/DispatchConfig"
import { DEFAULT_RETRY_SCHEDULE } from "@svc/webhooks/RetrySchedule"
import { ConfigProvider, Effect, Exit, Result } from "effect"

const live = { enabled: true, deleted: false }
const state = (overrides: Partial<ClaimState>): ClaimState => ({
  delivery: { status: "pending", round: 1 },
  webhook: live,
  lastAttempt: null,
  ...overrides
})

describe("decideClaim", () => {
  it("attempts a fresh job, and the next attempt after a failed one", () => {
    expect(decideClaim({ round: 1, attempt: 1 }, state({}))).toEqual({ _tag: "Attempt", recoverPrevious: false })
    expect(decideClaim({ round: 1, attempt: 3 }, state({
      delivery: { status: "failed", round: 1 },
      lastAttempt: { attempt: 2, status: "failed" }
    }))).toEqual({ _tag: "Attempt", recoverPrevious: false })
  })

  it("closes an attempt left pending by a dispatcher that died, then attempts again", () => {
    expect(decideClaim({ round: 1, attempt: 2 }, state({ lastAttempt: { attempt: 1, status: "pending" } })))
      .toEqual({ _tag: "Attempt", recoverPrevious: true })
  })

  it("skips unknown deliveries, older rounds, finished deliveries and attempts already made", () => {
    expect(decideClaim({ round: 1, attempt: 1 }, state({ delivery: null }))).toEqual({ _tag: "Skip", reason: "unknown_delivery" })
    expect(decideClaim({ round: 1, attempt: 2 }, state({ delivery: { status: "pending", round: 2 } })))
      .toEqual({ _tag: "Skip", reason: "stale_round" })
    for (const status of ["succeeded", "dead_letter"] as const) {
      expect(decideClaim({ round: 1, attempt: 2 }, state({ delivery: { status, round: 1 } }))).toEqual({ _tag: "Skip", reason: "finished" })
    }
    // A second copy of a job (re-published) meets rows its twin already wrote.
    expect(decideClaim({ round: 1, attempt: 1 }, state({ lastAttempt: { attempt: 1, status: "pending" } })))
      .toEqual({ _tag: "Skip", reason: "duplicate" })
    expect(decideClaim({ round: 1, attempt: 2 }, state({ delivery: { status: "failed", round: 1 }, lastAttempt: { attempt: 4, status: "failed" } })))
      .toEqual({ _tag: "Skip", reason: "duplicate" })
  })

  it("abandons the deliveries of a paused or deleted webhook (deleted wins)", () => {
    expect(decideClaim({ round: 1, attempt: 2 }, state({ webhook: { enabled: false, deleted: false }, lastAttempt: { attempt: 1, status: "failed" } })))
      .toEqual({ _tag: "Abandon", reason: "paused", recoverPrevious: false })
    expect(decideClaim({ round: 1, attempt: 2 }, state({ webhook: { enabled: false, deleted: true }, lastAttempt: { attempt: 1, status: "pending" } })))
      .toEqual({ _tag: "Abandon", reason: "deleted", recoverPrevious: true })
  })
})

describe("afterAttempt", () => {
  it("naks with the default ladder's waits, 30 s, 2 min, 10 min, 1 h, 6 h, and dead-letters after the sixth", () => {
    const waits = [1, 2, 3, 4, 5].map((attempt) => afterAttempt(DEFAULT_RETRY_SCHEDULE, attempt, { outcome: "failed" }))
    expect(waits).toEqual([
      { _tag: "Failed", nextAttempt: 2, delayMs: 30_000 },
      { _tag: "Failed", nextAttempt: 3, delayMs: 120_000 },
      { _tag: "Failed", nextAttempt: 4, delayMs: 600_000 },
      { _tag: "Failed", nextAttempt: 5, delayMs: 3_600_000 },
      { _tag: "Failed", nextAttempt: 6, delayMs: 21_600_000 }
    ])
    expect(afterAttempt(DEFAULT_RETRY_SCHEDULE, 6, { outcome: "failed" })).toEqual({ _tag: "DeadLetter" })
    for (const attempt of [1, 6]) {
      expect(afterAttempt(DEFAULT_RETRY_SCHEDULE, attempt, { outcome: "succeeded" })).toEqual({ _tag: "Succeeded" })
    }
  })
})

describe("decideLostJob", () => {
  it("closes a pending sixth attempt, adds a dead row when the sixth never started, and leaves the rest alone", () => {
    const job = { round: 1, deliveries: 6 }
    expect(decideLostJob(job, { delivery: { status: "pending", round: 1 }, lastAttempt: { attempt: 6, status: "pending" } }))
      .toEqual({ _tag: "CloseLastAttempt" })
    expect(decideLostJob(job, { delivery: { status: "failed", round: 1 }, lastAttempt: { attempt: 5, status: "failed" } }))
      .toEqual({ _tag: "AddDeadRow", attempt: 6 })
    expect(decideLostJob(job, { delivery: { status: "dead_letter", round: 1 }, lastAttempt: { attempt: 6, status: "dead_letter" } }))
      .toEqual({ _tag: "Nothing" })
    expect(decideLostJob(job, { delivery: { status: "pending", round: 2 }, lastAttempt: null })).toEqual({ _tag: "Nothing" })
    expect(decideLostJob(job, { delivery: null, lastAttempt: null })).toEqual({ _tag: "Nothing" })
  })
})

describe("DispatchConfig", () => {
  const load = (env: Record<string, string>) =>
    Effect.runSyncExit((DispatchConfig as Effect.Effect<DispatchSettings, unknown>).pipe(Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))))

  it("defaults: the spec's ladder, 5 s attempts, 30 s ack_wait", () => {
    const exit = load({})
    expect(Exit.isSuccess(exit) && exit.value).toEqual({
      schedule: DEFAULT_RETRY_SCHEDULE,
      attemptTimeoutMs: 5_000,
      ackWaitMs: 30_000,
      concurrency: 16,
      maxAckPending: 1_000,
      discoveryIntervalMs: 5_000
    })
  })

  it("reads every variable and refuses bad values", () => {
    const exit = load({
      SVC_WEBHOOK_RETRY_SCHEDULE: "300ms,300ms,300ms,300ms,300ms",
      SVC_WEBHOOK_ATTEMPT_TIMEOUT: "250ms",
      SVC_WEBHOOK_ACK_WAIT: "2s",
      SVC_WEBHOOK_CONCURRENCY: "3",
      SVC_WEBHOOK_MAX_ACK_PENDING: "50",
      SVC_WEBHOOK_DISCOVERY_INTERVAL: "1m"
    })
    expect(Exit.isSuccess(exit) && exit.value).toMatchObject({ attemptTimeoutMs: 250, ackWaitMs: 2_000, concurrency: 3, maxAckPending: 50, discoveryIntervalMs: 60_000 })
    for (const [name, value] of [
      ["SVC_WEBHOOK_ACK_WAIT", "30"], ["SVC_WEBHOOK_ACK_WAIT", "0s"], ["SVC_WEBHOOK_ATTEMPT_TIMEOUT", "25h"],
      ["SVC_WEBHOOK_CONCURRENCY", "0"], ["SVC_WEBHOOK_CONCURRENCY", "two"], ["SVC_WEBHOOK_MAX_ACK_PENDING", "-1"],
      ["SVC_WEBHOOK_RETRY_SCHEDULE", "1s,1s"]
    ] as const) {
      expect([name, value, Exit.isFailure(load({ [name]: value }))]).toEqual([name, value, true])
    }
  })

  it("parseDuration", () => {
    expect(parseDuration(" 30s ")).toEqual(Result.succeed(30_000))
    expect(parseDuration("2m")).toEqual(Result.succeed(120_000))
    for (const bad of ["", "1.5s", "1 s", "-1s", "1d", "0ms", "25h"]) expect(Result.isFailure(parseDuration(bad))).toBe(true)
  })
})
