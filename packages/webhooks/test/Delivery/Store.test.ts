/**
 * Retention (DeliveryStore.pruneFinished) in a real database: finished deliveries older than the
 * period go with their attempts; live ones, recent ones and deliveries still on the ladder stay;
 * a deleted webhook goes once nothing refers to it.
 */
import { describe, expect, layer } from "@effect/vitest"
import { makeId } from "@svc/domain/Ids"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as Store from "@svc/webhooks/Delivery/Store"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

const THIRTY_DAYS_MS = 30 * 86_400_000

describe("DeliveryStore.pruneFinished", () => {
  layer(TestDatabase.layer, { excludeTestServices: true })((it) => {
    it.effect("deletes finished deliveries past the retention period, with their attempts, in chunks", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const orgId = makeId("org")
        const live = makeId("webhook")
        const gone = makeId("webhook")
        const goneRecently = makeId("webhook")
        for (const [id, deletedDaysAgo] of [[live, null], [gone, 40], [goneRecently, 2]] as const) {
          yield* sql`INSERT INTO webhooks (id, org_id, url, events, secret, enabled, deleted_at)
            VALUES (${id}, ${orgId}, 'http://127.0.0.1:9/', ${["*"]}::text[], 'sealed', ${deletedDaysAgo === null},
                    ${deletedDaysAgo === null ? null : new Date(Date.now() - deletedDaysAgo * 86_400_000)})`
        }
        const delivery = (webhookId: string, status: string, daysAgo: number) =>
          Effect.gen(function*() {
            const id = makeId("delivery")
            const at = new Date(Date.now() - daysAgo * 86_400_000)
            yield* sql`INSERT INTO webhook_deliveries (id, webhook_id, org_id, event, event_msg_id, body, status, created_at, updated_at)
              VALUES (${id}, ${webhookId}, ${orgId}, 'ping', ${id}, '{}', ${status}, ${at}, ${at})`
            yield* sql`INSERT INTO webhook_attempts (id, delivery_id, webhook_id, round, attempt, status, created_at)
              VALUES (${makeId("attempt")}, ${id}, ${webhookId}, 1, 1, ${
              status === "dead_letter" ? "dead_letter" : status
            }, ${at})`
            return id
          })
        const oldDone = yield* Effect.forEach(Array.from({ length: 5 }), () => delivery(live, "succeeded", 31))
        const oldDead = yield* delivery(live, "dead_letter", 45)
        const oldOfGone = yield* delivery(gone, "succeeded", 35)
        const recent = yield* delivery(live, "succeeded", 29)
        const onTheLadder = yield* delivery(live, "failed", 60)
        const waiting = yield* delivery(live, "pending", 60)

        // Two at a time: the caller goes on while a chunk comes back full.
        expect(yield* Store.pruneFinished(THIRTY_DAYS_MS, 2)).toBe(2)
        expect(yield* Store.pruneFinished(THIRTY_DAYS_MS, 2)).toBe(2)
        expect(yield* Store.pruneFinished(THIRTY_DAYS_MS, 2)).toBe(2)
        expect(yield* Store.pruneFinished(THIRTY_DAYS_MS, 2)).toBe(1)
        expect(yield* Store.pruneFinished(THIRTY_DAYS_MS, 2)).toBe(0)

        const left = new Set((yield* sql<{ id: string }>`SELECT id FROM webhook_deliveries`).map((r) => r.id))
        expect(left).toEqual(new Set([recent, onTheLadder, waiting]))
        for (const id of [...oldDone, oldDead, oldOfGone]) expect(left.has(id)).toBe(false)
        const attempts = (yield* sql<{ delivery_id: string }>`SELECT delivery_id FROM webhook_attempts`).map((r) =>
          r.delivery_id
        )
        expect(new Set(attempts)).toEqual(left)
        // The webhook deleted 40 days ago had nothing left: gone. The one deleted 2 days ago stays.
        const hooks = (yield* sql<{ id: string }>`SELECT id FROM webhooks`).map((r) => r.id)
        expect(new Set(hooks)).toEqual(new Set([live, goneRecently]))
      }))
  })
})
