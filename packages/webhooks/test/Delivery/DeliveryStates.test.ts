/**
 * The delivery state machine without I/O (DeliveryStates.ts), the nak delays of the default ladder,
 * and the dispatcher's configuration parsing.
 */
import { describe, expect, it } from "@effect/vitest"
import { DispatchConfig, type DispatchSettings } from "@svc/webhooks/Config"
import {
  afterAttempt,
  type ClaimJob,
  type ClaimState,
  decideClaim,
  decideLostJob,
  firstAttemptFastPath
} from "@svc/webhooks/Delivery/DeliveryStates"
import { DEFAULT_RETRY_SCHEDULE } from "@svc/webhooks/Delivery/RetrySchedule"
import { ConfigProvider, Effect, Exit } from "effect"

const live = { enabled: true, deleted: false }
const state = (overrides: Partial<ClaimState>): ClaimState => ({
  delivery: { status: "pending", round: 1, jobSeq: null },
  webhook: live,
  lastAttempt: null,
  ...overrides
})
const job = (overrides: Partial<ClaimJob> = {}): ClaimJob => ({ round: 1, jobSeq: 7, made: false, ...overrides })
const attempt = (n: number, recoverPrevious = false) => ({ _tag: "Attempt", attempt: n, recoverPrevious })

describe("decideClaim", () => {
  it("numbers attempts from the rows: a fresh job is attempt 1, the next after a failed one is one more", () => {
    expect(decideClaim(job(), state({}))).toEqual(attempt(1))
    expect(decideClaim(
      job(),
      state({
        delivery: { status: "failed", round: 1, jobSeq: 7 },
        lastAttempt: { attempt: 2, status: "failed" }
      })
    )).toEqual(attempt(3))
  })

  it("closes an attempt left pending by a dispatcher that died, then attempts the next", () => {
    // Whatever JetStream's count says of the redelivery (2.9.10 was seen saying 1 again).
    expect(
      decideClaim(
        job(),
        state({ delivery: { status: "pending", round: 1, jobSeq: 7 }, lastAttempt: { attempt: 1, status: "pending" } })
      )
    )
      .toEqual(attempt(2, true))
  })

  it("skips unknown deliveries, older rounds, finished deliveries and second copies of a round's job", () => {
    expect(decideClaim(job(), state({ delivery: null }))).toEqual({ _tag: "Skip", reason: "unknown_delivery" })
    expect(decideClaim(job(), state({ delivery: { status: "pending", round: 2, jobSeq: null } }))).toEqual({
      _tag: "Skip",
      reason: "stale_round"
    })
    for (const status of ["succeeded", "dead_letter"] as const) {
      expect(decideClaim(job(), state({ delivery: { status, round: 1, jobSeq: 7 } }))).toEqual({
        _tag: "Skip",
        reason: "finished"
      })
    }
    // Another stream message of the same delivery and round (published again after the dedupe window).
    expect(
      decideClaim(
        job({ jobSeq: 9 }),
        state({ delivery: { status: "pending", round: 1, jobSeq: 7 }, lastAttempt: { attempt: 1, status: "pending" } })
      )
    )
      .toEqual({ _tag: "Skip", reason: "duplicate" })
  })

  it("abandons the deliveries of a paused or deleted webhook (deleted wins), and never makes a seventh attempt", () => {
    expect(
      decideClaim(
        job(),
        state({ webhook: { enabled: false, deleted: false }, lastAttempt: { attempt: 1, status: "failed" } })
      )
    )
      .toEqual({ _tag: "Abandon", reason: "paused", attempt: 2, recoverPrevious: false })
    expect(
      decideClaim(
        job(),
        state({ webhook: { enabled: false, deleted: true }, lastAttempt: { attempt: 1, status: "pending" } })
      )
    )
      .toEqual({ _tag: "Abandon", reason: "deleted", attempt: 2, recoverPrevious: true })
    expect(
      decideClaim(
        job(),
        state({ delivery: { status: "pending", round: 1, jobSeq: 7 }, lastAttempt: { attempt: 6, status: "pending" } })
      )
    )
      .toEqual({ _tag: "Exhausted" })
  })

  it("records a call already made, whatever the webhook became meanwhile, after the rows", () => {
    expect(decideClaim(job({ made: true }), state({ webhook: { enabled: false, deleted: true } }))).toEqual(attempt(1))
    expect(
      decideClaim(
        job({ made: true }),
        state({ delivery: { status: "failed", round: 1, jobSeq: 7 }, lastAttempt: { attempt: 2, status: "failed" } })
      )
    )
      .toEqual(attempt(3))
  })
})

describe("firstAttemptFastPath", () => {
  it("only a first delivery whose job carries the body, of a webhook known live in a copy at least as new as the job's", () => {
    const first = { deliveryCount: 1, carriesBody: true, webhookVersion: 100 }
    const live = { enabled: true, version: 100 }
    expect(firstAttemptFastPath(first, live)).toBe(true)
    expect(firstAttemptFastPath(first, { enabled: true, version: 101 })).toBe(true)
    // The webhook changed after this dispatcher read it (a new url, say): read it afresh.
    expect(firstAttemptFastPath(first, { enabled: true, version: 99 })).toBe(false)
    expect(firstAttemptFastPath({ ...first, webhookVersion: undefined }, live)).toBe(false)
    expect(firstAttemptFastPath({ ...first, deliveryCount: 2 }, live)).toBe(false)
    expect(firstAttemptFastPath({ ...first, carriesBody: false }, live)).toBe(false)
    expect(firstAttemptFastPath(first, { enabled: false, version: 100 })).toBe(false)
    expect(firstAttemptFastPath(first, undefined)).toBe(false)
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
  it("closes a pending last attempt, adds a dead row after the rows when the last delivery never started, and leaves the rest alone", () => {
    const job = { round: 1, deliveries: 6 }
    expect(
      decideLostJob(job, {
        delivery: { status: "pending", round: 1, jobSeq: 7 },
        lastAttempt: { attempt: 6, status: "pending" }
      })
    )
      .toEqual({ _tag: "CloseLastAttempt" })
    expect(
      decideLostJob(job, {
        delivery: { status: "failed", round: 1, jobSeq: 7 },
        lastAttempt: { attempt: 5, status: "failed" }
      })
    )
      .toEqual({ _tag: "AddDeadRow", attempt: 6 })
    // Deliveries of the job that never reached a row (fetched, not called) do not number attempts.
    expect(
      decideLostJob(job, {
        delivery: { status: "failed", round: 1, jobSeq: 7 },
        lastAttempt: { attempt: 2, status: "failed" }
      })
    )
      .toEqual({ _tag: "AddDeadRow", attempt: 3 })
    expect(
      decideLostJob(job, {
        delivery: { status: "dead_letter", round: 1, jobSeq: 7 },
        lastAttempt: { attempt: 6, status: "dead_letter" }
      })
    )
      .toEqual({ _tag: "Nothing" })
    expect(decideLostJob(job, { delivery: { status: "pending", round: 2, jobSeq: null }, lastAttempt: null })).toEqual({
      _tag: "Nothing"
    })
    expect(decideLostJob(job, { delivery: null, lastAttempt: null })).toEqual({ _tag: "Nothing" })
  })
})

describe("DispatchConfig", () => {
  const load = (env: Record<string, string>) =>
    Effect.runSyncExit(
      (DispatchConfig as Effect.Effect<DispatchSettings, unknown>).pipe(
        Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))
      )
    )

  it("defaults: the spec's ladder, 5 s attempts, 30 s ack_wait, 30 days of finished deliveries", () => {
    const exit = load({})
    expect(Exit.isSuccess(exit) && exit.value).toEqual({
      schedule: DEFAULT_RETRY_SCHEDULE,
      attemptTimeoutMs: 5_000,
      ackWaitMs: 30_000,
      concurrency: 16,
      maxAckPending: 1_000,
      discoveryIntervalMs: 5_000,
      retentionMs: 30 * 86_400_000
    })
  })

  it("reads every variable and refuses bad values", () => {
    const exit = load({
      SVC_WEBHOOK_RETRY_SCHEDULE: "300ms,300ms,300ms,300ms,300ms",
      SVC_WEBHOOK_ATTEMPT_TIMEOUT: "250ms",
      SVC_WEBHOOK_ACK_WAIT: "2s",
      SVC_WEBHOOK_CONCURRENCY: "3",
      SVC_WEBHOOK_MAX_ACK_PENDING: "50",
      SVC_WEBHOOK_DISCOVERY_INTERVAL: "1m",
      SVC_WEBHOOK_RETENTION: "7d"
    })
    expect(Exit.isSuccess(exit) && exit.value).toMatchObject({
      attemptTimeoutMs: 250,
      ackWaitMs: 2_000,
      concurrency: 3,
      maxAckPending: 50,
      discoveryIntervalMs: 60_000,
      retentionMs: 7 * 86_400_000
    })
    for (
      const [name, value] of [
        ["SVC_WEBHOOK_ACK_WAIT", "30"],
        ["SVC_WEBHOOK_ACK_WAIT", "0s"],
        ["SVC_WEBHOOK_ATTEMPT_TIMEOUT", "25h"],
        ["SVC_WEBHOOK_CONCURRENCY", "0"],
        ["SVC_WEBHOOK_CONCURRENCY", "two"],
        ["SVC_WEBHOOK_MAX_ACK_PENDING", "-1"],
        ["SVC_WEBHOOK_RETRY_SCHEDULE", "1s,1s"],
        ["SVC_WEBHOOK_RETENTION", "0d"],
        ["SVC_WEBHOOK_RETENTION", "30"],
        ["SVC_WEBHOOK_RETENTION", "3651d"],
        ["SVC_WEBHOOK_ACK_WAIT", "2d"]
      ] as const
    ) {
      expect([name, value, Exit.isFailure(load({ [name]: value }))]).toEqual([name, value, true])
    }
  })
})
