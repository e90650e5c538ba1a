/**
 * The dispatcher claims attempts in one SQL statement (DeliveryStore.claimAttempts); the rules
 * are those of the pure DeliveryStates.decideClaim. This test puts every combination of states in a
 * real database and checks that the statement does what decideClaim says, case by case.
 */
import { assert, describe, expect, layer } from "@effect/vitest"
import { makeId } from "@svc/domain/Ids"
import type { AttemptStatus, DeliveryStatus } from "@svc/domain/Webhook"
import * as TestDatabase from "@svc/testing/TestDatabase"
import {
  type ClaimJob,
  type ClaimState,
  decideClaim,
  LOST_ATTEMPT_ERROR,
  NOT_ATTEMPTED_DELETED,
  NOT_ATTEMPTED_PAUSED
} from "@svc/webhooks/Delivery/DeliveryStates"
import * as Store from "@svc/webhooks/Delivery/Store"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

type WebhookState = "live" | "paused" | "deleted"
type Made = "succeeded" | "failed" | null

interface Case {
  readonly delivery: { readonly status: DeliveryStatus; readonly round: number; readonly jobSeq: number | null } | null
  readonly webhook: WebhookState
  /** Attempt rows of the delivery's current round: [attempt, status]. */
  readonly rows: ReadonlyArray<readonly [number, AttemptStatus]>
  readonly job: { readonly round: number; readonly jobSeq: number; readonly made: Made; readonly otherWebhook: boolean }
}

const WAITS = [1_000, 2_000, 3_000, 4_000, 5_000]
const failed = (n: number) => Array.from({ length: n }, (_, i) => [i + 1, "failed"] as const)

const cases: Array<Case> = []
for (const status of ["pending", "failed", "succeeded", "dead_letter"] as const) {
  for (const webhook of ["live", "paused", "deleted"] as const) {
    for (
      const rows of [
        [],
        [[1, "pending"]],
        [[1, "failed"]],
        [...failed(1), [2, "pending"]],
        failed(3),
        [...failed(5), [6, "pending"]]
      ] as ReadonlyArray<ReadonlyArray<readonly [number, AttemptStatus]>>
    ) {
      for (const made of [null, "succeeded", "failed"] as const) {
        cases.push({
          delivery: { status, round: 2, jobSeq: rows.length > 0 ? 7 : null },
          webhook,
          rows,
          job: { round: 2, jobSeq: 7, made, otherWebhook: false }
        })
      }
    }
    // A second copy of the round's job; a job of an older round; one under another webhook's subject.
    cases.push({
      delivery: { status, round: 2, jobSeq: 7 },
      webhook,
      rows: [[1, "pending"]],
      job: { round: 2, jobSeq: 9, made: null, otherWebhook: false }
    })
    cases.push({
      delivery: { status, round: 2, jobSeq: 7 },
      webhook,
      rows: [[1, "failed"]],
      job: { round: 2, jobSeq: 9, made: "succeeded", otherWebhook: false }
    })
    cases.push({
      delivery: { status, round: 2, jobSeq: null },
      webhook,
      rows: [],
      job: { round: 1, jobSeq: 7, made: null, otherWebhook: false }
    })
    cases.push({
      delivery: { status, round: 2, jobSeq: null },
      webhook,
      rows: [],
      job: { round: 2, jobSeq: 7, made: null, otherWebhook: true }
    })
  }
}
cases.push({ delivery: null, webhook: "live", rows: [], job: { round: 1, jobSeq: 7, made: null, otherWebhook: false } })

const expectedOf = (c: Case) => {
  const state: ClaimState = {
    delivery: c.delivery,
    webhook: { enabled: c.webhook === "live", deleted: c.webhook === "deleted" },
    lastAttempt: c.rows.length === 0 ? null : { attempt: c.rows.at(-1)![0], status: c.rows.at(-1)![1] }
  }
  const job: ClaimJob = { round: c.job.round, jobSeq: c.job.jobSeq, made: c.job.made !== null }
  // Another webhook's job is unknown to this webhook, whatever the rows say.
  return c.job.otherWebhook || c.delivery === null ? ({ _tag: "Skip" } as const) : decideClaim(job, state)
}

describe("claimAttempts agrees with decideClaim", () => {
  layer(TestDatabase.layer, { excludeTestServices: true })((it) => {
    it.effect(`every combination of delivery, webhook, attempt rows and job (${cases.length} cases)`, () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const orgId = makeId("org")
        const hooks: Record<WebhookState, string> = {
          live: makeId("webhook"),
          paused: makeId("webhook"),
          deleted: makeId("webhook")
        }
        const other = makeId("webhook")
        for (const [state, id] of [...Object.entries(hooks), ["live", other]] as const) {
          yield* sql`INSERT INTO webhooks (id, org_id, url, events, secret, enabled, deleted_at)
            VALUES (${id}, ${orgId}, 'http://127.0.0.1:9/', ${["*"]}::text[], 'a-secret-of-16-chars', ${
            state === "live"
          },
                    ${state === "deleted" ? new Date() : null})`
        }
        // Set every case up, claim them all in one batch (one input per delivery), then check.
        const setups = []
        for (const c of cases) {
          const deliveryId = makeId("delivery")
          const webhookId = hooks[c.webhook]
          if (c.delivery !== null) {
            yield* sql`INSERT INTO webhook_deliveries (id, webhook_id, org_id, event, event_msg_id, body, status, round, job_seq)
              VALUES (${deliveryId}, ${webhookId}, ${orgId}, 'ping', ${deliveryId}, '{}', ${c.delivery.status}, ${c.delivery.round}::int, ${c.delivery.jobSeq})`
            for (const [attempt, status] of c.rows) {
              yield* sql`INSERT INTO webhook_attempts (id, delivery_id, webhook_id, round, attempt, status)
                VALUES (${
                makeId("attempt")
              }, ${deliveryId}, ${webhookId}, ${c.delivery.round}::int, ${attempt}::int, ${status})`
            }
          }
          setups.push({ c, deliveryId, webhookId })
        }
        const results = yield* Store.claimAttempts(
          setups.map(({ c, deliveryId, webhookId }) => ({
            deliveryId,
            webhookId: c.job.otherWebhook ? other : webhookId,
            round: c.job.round,
            jobSeq: c.job.jobSeq,
            ...(c.job.made === null ? {} : {
              made: {
                outcome: c.job.made,
                responseCode: c.job.made === "succeeded" ? 200 : 503,
                error: c.job.made === "succeeded" ? null : "HTTP 503",
                durationMs: 12
              }
            })
          })),
          WAITS
        )
        const seen = new Set<string>()
        for (const [i, { c, deliveryId }] of setups.entries()) {
          const expected = expectedOf(c)
          const got = results[i]!
          const label = JSON.stringify(c)
          const rows = yield* sql<
            {
              attempt: number
              status: string
              error: string | null
              response_code: number | null
              next_attempt_at: Date | null
            }
          >`
            SELECT attempt, status, error, response_code, next_attempt_at FROM webhook_attempts WHERE delivery_id = ${deliveryId} ORDER BY attempt`
          const [delivery] = yield* sql<
            { status: string; job_seq: bigint | null }
          >`SELECT status, job_seq FROM webhook_deliveries WHERE id = ${deliveryId}`
          if (expected._tag === "Skip") {
            seen.add("skip")
            expect([label, got._tag]).toEqual([label, "Skip"])
            // Nothing changed.
            expect([label, rows.map((r) => [r.attempt, r.status])]).toEqual([label, c.rows.map(([a, s]) => [a, s])])
            expect([label, delivery?.status]).toEqual([label, c.delivery?.status])
            continue
          }
          expect([label, String(delivery?.job_seq)]).toEqual([label, String(c.job.jobSeq)])
          if (expected._tag === "Exhausted") {
            seen.add("exhausted")
            expect([label, got._tag]).toEqual([label, "Abandoned"])
            // No seventh row: the sixth, left pending, is dead, and so is the delivery.
            expect([label, rows.map((r) => [r.attempt, r.status]).at(-1), rows.at(-1)?.error]).toEqual([label, [
              6,
              "dead_letter"
            ], LOST_ATTEMPT_ERROR])
            expect([label, rows.length]).toEqual([label, c.rows.length])
            expect([label, delivery?.status]).toEqual([label, "dead_letter"])
            continue
          }
          const mine = rows.find((r) => r.attempt === expected.attempt)
          if (expected._tag === "Abandon") {
            seen.add(`abandon ${expected.reason}`)
            expect([label, got._tag]).toEqual([label, "Abandoned"])
            const reason = { paused: NOT_ATTEMPTED_PAUSED, deleted: NOT_ATTEMPTED_DELETED }[expected.reason]
            expect([label, mine?.status, mine?.error]).toEqual([label, "dead_letter", reason])
            expect([label, delivery?.status]).toEqual([label, "dead_letter"])
          } else if (c.job.made === null) {
            seen.add("attempt")
            assert(got._tag === "Attempt", label)
            expect([label, got.attempt, got.data.body, mine?.status]).toEqual([
              label,
              expected.attempt,
              "{}",
              "pending"
            ])
            expect([label, delivery?.status]).toEqual([label, "pending"])
          } else {
            seen.add(`recorded ${c.job.made}`)
            const status = c.job.made === "succeeded" ? "succeeded" : expected.attempt >= 6 ? "dead_letter" : "failed"
            expect([label, got]).toEqual([label, { _tag: "Recorded", attempt: expected.attempt, status }])
            expect([label, mine?.status, mine?.response_code, mine?.error]).toEqual([
              label,
              status,
              c.job.made === "succeeded" ? 200 : 503,
              c.job.made === "succeeded" ? null : "HTTP 503"
            ])
            // The next attempt is scheduled by the ladder's wait after this attempt.
            expect([label, mine?.next_attempt_at !== null]).toEqual([label, status === "failed"])
            expect([label, delivery?.status]).toEqual([label, status])
          }
          // The highest row before this one: closed as lost when it was still pending, else as it was.
          const last = c.rows.at(-1)
          if (last !== undefined) {
            const now = rows.find((r) => r.attempt === last[0])
            if (expected.recoverPrevious) seen.add("recover")
            expect([label, now?.status, now?.error ?? null]).toEqual(
              expected.recoverPrevious ? [label, "failed", LOST_ATTEMPT_ERROR] : [label, last[1], null]
            )
          }
        }
        // The matrix covers every outcome.
        expect([...seen].sort()).toEqual([
          "abandon deleted",
          "abandon paused",
          "attempt",
          "exhausted",
          "recorded failed",
          "recorded succeeded",
          "recover",
          "skip"
        ])
      }))
  })
})
