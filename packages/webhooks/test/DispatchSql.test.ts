/**
 * The dispatcher claims attempts in one SQL statement (DeliveryStore.claimAttempts); the rules
 * are those of the pure Dispatch.decideClaim. This test puts every combination of states in a
 * real database and checks that the statement does what decideClaim says, case by case.
 */
import { assert, describe, expect, layer } from "@effect/vitest"
import { makeId } from "@svc/domain/Ids"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { type AttemptStatus, type ClaimState, decideClaim, type DeliveryStatus, LOST_ATTEMPT_ERROR, NOT_ATTEMPTED_DELETED, NOT_ATTEMPTED_PAUSED } from "@svc/webhooks/Dispatch"
import * as Store from "@svc/webhooks/DeliveryStore"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

type WebhookState = "live" | "paused" | "deleted"

interface Case {
  readonly delivery: { readonly status: DeliveryStatus; readonly round: number } | null
  readonly webhook: WebhookState
  /** Attempt rows of the delivery's current round: [attempt, status]. */
  readonly rows: ReadonlyArray<readonly [number, AttemptStatus]>
  readonly job: { readonly round: number; readonly attempt: number; readonly otherWebhook: boolean }
}

const cases: Array<Case> = []
for (const status of ["pending", "failed", "succeeded", "dead_letter"] as const) {
  for (const webhook of ["live", "paused", "deleted"] as const) {
    for (const rows of [
      [],
      [[1, "pending"]],
      [[1, "failed"]],
      [[1, "failed"], [2, "pending"]],
      [[1, "failed"], [2, "failed"], [3, "failed"]]
    ] as ReadonlyArray<ReadonlyArray<readonly [number, AttemptStatus]>>) {
      for (const attempt of [1, 2, 3]) {
        cases.push({ delivery: { status, round: 2 }, webhook, rows, job: { round: 2, attempt, otherWebhook: false } })
      }
    }
    // A job of an older round, and one published under another webhook's subject.
    cases.push({ delivery: { status, round: 2 }, webhook, rows: [], job: { round: 1, attempt: 1, otherWebhook: false } })
    cases.push({ delivery: { status, round: 2 }, webhook, rows: [], job: { round: 2, attempt: 1, otherWebhook: true } })
  }
}
cases.push({ delivery: null, webhook: "live", rows: [], job: { round: 1, attempt: 1, otherWebhook: false } })

const expectedOf = (c: Case) => {
  const state: ClaimState = {
    delivery: c.delivery,
    webhook: { enabled: c.webhook === "live", deleted: c.webhook === "deleted" },
    lastAttempt: c.rows.length === 0 ? null : { attempt: c.rows.at(-1)![0], status: c.rows.at(-1)![1] }
  }
  // Another webhook's job is unknown to this webhook, whatever the rows say.
  return c.job.otherWebhook || c.delivery === null ? ({ _tag: "Skip" } as const) : decideClaim(c.job, state)
}

describe("claimAttempts agrees with decideClaim", () => {
  layer(TestDatabase.layer, { excludeTestServices: true })((it) => {
    it.effect(`every combination of delivery, webhook and attempt rows (${cases.length} cases)`, () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const orgId = makeId("org")
        const hooks: Record<WebhookState, string> = { live: makeId("webhook"), paused: makeId("webhook"), deleted: makeId("webhook") }
        const other = makeId("webhook")
        for (const [state, id] of [...Object.entries(hooks), ["live", other]] as const) {
          yield* sql`INSERT INTO webhooks (id, org_id, url, events, secret, enabled, deleted_at)
            VALUES (${id}, ${orgId}, 'http://127.0.0.1:9/', ${["*"]}::text[], 'a-secret-of-16-chars', ${state === "live"},
                    ${state === "deleted" ? new Date() : null})`
        }
        // Set every case up, claim them all in one batch (one input per delivery), then check.
        const setups = []
        for (const c of cases) {
          const deliveryId = makeId("delivery")
          const webhookId = hooks[c.webhook]
          if (c.delivery !== null) {
            yield* sql`INSERT INTO webhook_deliveries (id, webhook_id, org_id, event, event_msg_id, body, status, round)
              VALUES (${deliveryId}, ${webhookId}, ${orgId}, 'ping', ${deliveryId}, '{}', ${c.delivery.status}, ${c.delivery.round}::int)`
            for (const [attempt, status] of c.rows) {
              yield* sql`INSERT INTO webhook_attempts (id, delivery_id, webhook_id, round, attempt, status)
                VALUES (${makeId("attempt")}, ${deliveryId}, ${webhookId}, ${c.delivery.round}::int, ${attempt}::int, ${status})`
            }
          }
          setups.push({ c, deliveryId, webhookId })
        }
        const results = yield* Store.claimAttempts(setups.map(({ c, deliveryId, webhookId }) => ({
          deliveryId,
          webhookId: c.job.otherWebhook ? other : webhookId,
          round: c.job.round,
          attempt: c.job.attempt
        })))
        let attempts = 0
        let abandoned = 0
        for (const [i, { c, deliveryId }] of setups.entries()) {
          const expected = expectedOf(c)
          const got = results[i]!
          const label = JSON.stringify(c)
          const rows = yield* sql<{ attempt: number; status: string; error: string | null }>`
            SELECT attempt, status, error FROM webhook_attempts WHERE delivery_id = ${deliveryId} ORDER BY attempt`
          const [delivery] = yield* sql<{ status: string }>`SELECT status FROM webhook_deliveries WHERE id = ${deliveryId}`
          if (expected._tag === "Skip") {
            expect([label, got._tag]).toEqual([label, "Skip"])
            // Nothing changed.
            expect([label, rows.map((r) => [r.attempt, r.status])]).toEqual([label, c.rows.map(([a, s]) => [a, s])])
            continue
          }
          const mine = rows.find((r) => r.attempt === c.job.attempt)
          if (expected._tag === "Abandon") {
            abandoned++
            expect([label, got._tag]).toEqual([label, "Abandoned"])
            expect([label, mine?.status, mine?.error]).toEqual([label, "dead_letter", expected.reason === "paused" ? NOT_ATTEMPTED_PAUSED : NOT_ATTEMPTED_DELETED])
            expect([label, delivery?.status]).toEqual([label, "dead_letter"])
          } else {
            attempts++
            assert(got._tag === "Attempt", label)
            expect([label, got.data.body, mine?.status]).toEqual([label, "{}", "pending"])
            expect([label, delivery?.status]).toEqual([label, "pending"])
          }
          // The last attempt before this one: closed as lost when it was still pending, else as it was.
          const last = c.rows.at(-1)
          if (last !== undefined) {
            const now = rows.find((r) => r.attempt === last[0])
            expect([label, now?.status, now?.error ?? null]).toEqual(
              expected.recoverPrevious ? [label, "failed", LOST_ATTEMPT_ERROR] : [label, last[1], null]
            )
          }
        }
        // The matrix covers every outcome.
        expect(attempts).toBeGreaterThan(0)
        expect(abandoned).toBeGreaterThan(0)
      }))
  })
})
