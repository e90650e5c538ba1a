/**
 * Webhook delivery end to end, in one process with real parts: Postgres, NATS JetStream, the
 * outbox relay, the fan-out, a dispatcher and HTTP receivers on 127.0.0.1 (allowed through
 * SVC_WEBHOOK_ALLOWED_SUBNETS). The ladder is shortened by SVC_WEBHOOK_RETRY_SCHEDULE.
 */
import { assert, describe, expect, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { makeOrgId } from "@svc/domain/Ids"
import * as Outbox from "@svc/events/Outbox"
import { eventually } from "@svc/testing/Eventually"
import { attemptRows, deliveriesOf, deliveryStatus } from "@svc/testing/WebhookDeliveries"
import { type Received, receiver } from "@svc/testing/WebhookReceiver"
import { FanOut } from "@svc/webhooks/Delivery/FanOut"
import { WebhookDispatcher } from "@svc/webhooks/Delivery/WebhookDispatcher"
import { Webhooks } from "@svc/webhooks/Subscriptions/Webhooks"
import { Context, Effect, Exit, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as crypto from "node:crypto"
import * as net from "node:net"
import { TEST_SCHEDULE, webhookStack } from "../Harness.ts"

/** The test's own HMAC check, independent of Signature.ts and the SDK. */
const signatureOk = (secret: string, request: Received) => {
  const expected = "sha256=" +
    crypto.createHmac("sha256", Buffer.from(secret, "utf8")).update(request.body).digest("hex")
  const given = String(request.headers["x-svc-signature"] ?? "")
  return given.length === expected.length && crypto.timingSafeEqual(Buffer.from(given), Buffer.from(expected))
}

const createHook = (
  orgId: string,
  url: string,
  extra: { events?: Array<string>; secret?: string; enabled?: boolean } = {}
) =>
  Effect.gen(function*() {
    const webhooks = yield* Webhooks
    const created = yield* webhooks.create(orgId, {
      url,
      events: extra.events ?? ["*"],
      enabled: extra.enabled ?? true,
      ...(extra.secret ? { secret: extra.secret } : {})
    })
    assert(created._tag === "Created")
    return created.value
  })

const freeClosedPort = () =>
  Effect.promise(() =>
    new Promise<number>((resolve) => {
      const server = net.createServer()
      server.listen(0, "127.0.0.1", () => {
        const { port } = server.address() as net.AddressInfo
        server.close(() => resolve(port))
      })
    })
  )

describe("webhook delivery", () => {
  layer(webhookStack(), { excludeTestServices: true, timeout: 60_000 })((it) => {
    it.effect("runs the whole ladder: six signed attempts at the schedule's gaps, dead_letter, then a manual retry succeeds", () =>
      Effect.gen(function*() {
        const webhooks = yield* Webhooks
        const orgId = makeOrgId()
        const secret = "s3cret-of-the-ladder-test"
        const rx = yield* receiver(() => ({ status: 500 }))
        const hook = yield* createHook(orgId, rx.url, { secret })
        const { delivery_id } = yield* webhooks.test(orgId, hook.id)

        yield* Effect.promise(() => rx.waitFor(6))
        yield* eventually(deliveryStatus(delivery_id), (d) => d?.status === "dead_letter")
        // Nothing after the sixth: give a would-be seventh attempt time to show up.
        yield* Effect.sleep(800)
        expect(rx.received).toHaveLength(6)

        // The same bytes, delivery id and signature on every attempt; the signature checks out.
        const [first] = rx.received
        for (const request of rx.received) {
          expect(request.body.equals(first!.body)).toBe(true)
          expect(request.headers["x-svc-delivery-id"]).toBe(delivery_id)
          expect(request.headers["x-svc-delivery-webhook-id"]).toBe(hook.id)
          expect(request.headers["x-svc-event"]).toBe("ping")
          expect(request.headers["content-type"]).toBe("application/json")
          expect(request.headers["x-svc-signature"]).toBe(first!.headers["x-svc-signature"])
          expect(signatureOk(secret, request)).toBe(true)
        }
        const envelope = JSON.parse(first!.body.toString("utf8"))
        expect(envelope).toEqual({
          event: "ping",
          org_id: orgId,
          ts: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
          data: { webhook_id: hook.id, message: expect.any(String) }
        })

        // Gaps follow the schedule: at least the wait, and well below ack_wait (5 s), which would
        // carry a job that was never nak'ed.
        const gaps = rx.received.slice(1).map((r, i) => r.at - rx.received[i]!.at)
        gaps.forEach((gap, i) => {
          expect(gap).toBeGreaterThanOrEqual(TEST_SCHEDULE[i]! - 5)
          expect(gap).toBeLessThan(TEST_SCHEDULE[i]! + 2_500)
        })

        const rows = yield* attemptRows(delivery_id)
        expect(rows.map((r) => [r.attempt, r.status, r.response_code])).toEqual([
          [1, "failed", 500],
          [2, "failed", 500],
          [3, "failed", 500],
          [4, "failed", 500],
          [5, "failed", 500],
          [6, "dead_letter", 500]
        ])
        rows.slice(0, 5).forEach((row, i) => {
          const wait = row.next_attempt_at!.getTime() - row.created_at.getTime()
          expect(wait).toBeGreaterThanOrEqual(TEST_SCHEDULE[i]!)
          expect(row.error).toBe("HTTP 500")
        })
        expect(rows[5]!.next_attempt_at).toBeNull()

        // Through the API's list: newest first, filterable.
        const dead = yield* webhooks.deliveries(orgId, hook.id, { limit: 50, offset: 0, status: "dead_letter" })
        expect(dead.deliveries.map((d) => [d.delivery_id, d.attempt])).toEqual([[delivery_id, 6]])
        const all = yield* webhooks.deliveries(orgId, hook.id, { limit: 4, offset: 0 })
        expect(all).toMatchObject({ total: 6, offset: 0, limit: 4, has_more: true })
        expect(all.deliveries.map((d) => d.attempt)).toEqual([6, 5, 4, 3])

        // Manual retry: the counter restarts at 1, the dead row is revived as `retried`.
        rx.setReply(() => ({ status: 200 }))
        expect(yield* webhooks.retry(orgId, hook.id, delivery_id)).toEqual({ delivery_id, status: "retried" })
        yield* Effect.promise(() => rx.waitFor(7))
        yield* eventually(deliveryStatus(delivery_id), (d) => d?.status === "succeeded")
        expect(rx.received[6]!.body.equals(first!.body)).toBe(true)
        expect(signatureOk(secret, rx.received[6]!)).toBe(true)
        const after = yield* attemptRows(delivery_id)
        expect(after.map((r) => [r.round, r.attempt, r.status])).toEqual([
          [1, 1, "failed"],
          [1, 2, "failed"],
          [1, 3, "failed"],
          [1, 4, "failed"],
          [1, 5, "failed"],
          [1, 6, "retried"],
          [2, 1, "succeeded"]
        ])
        // A succeeded delivery is not retryable.
        const again = yield* Effect.exit(webhooks.retry(orgId, hook.id, delivery_id))
        assert(Exit.isFailure(again))
        expect(JSON.stringify(again.cause)).toContain("delivery_not_retryable")
      }).pipe(Effect.scoped))

    it.effect("failures: 5xx, 3xx (not followed), a timeout, a refused connection", () =>
      Effect.gen(function*() {
        const webhooks = yield* Webhooks
        const orgId = makeOrgId()
        const five = yield* receiver(() => ({ status: 503 }))
        const redirect = yield* receiver(() => ({ status: 302, headers: { location: "http://127.0.0.1:1/elsewhere" } }))
        const slow = yield* receiver(() => ({ status: 200, delayMs: 2_000 }))
        const closed = yield* freeClosedPort()
        const cases = [
          { url: five.url, code: 503, error: "HTTP 503" },
          { url: redirect.url, code: 302, error: "redirect not followed (HTTP 302)" },
          { url: slow.url, code: null, error: "timeout after 1000 ms" },
          { url: `http://127.0.0.1:${closed}/hooks`, code: null, error: "connection refused" }
        ]
        const started = []
        for (const c of cases) {
          const hook = yield* createHook(orgId, c.url)
          started.push({ ...c, hook, delivery: (yield* webhooks.test(orgId, hook.id)).delivery_id })
        }
        for (const c of started) {
          const rows = yield* eventually(attemptRows(c.delivery), (rows) =>
            rows.length >= 1 && rows[0]!.status !== "pending")
          expect(rows[0]).toMatchObject({ attempt: 1, status: "failed", response_code: c.code, error: c.error })
          expect(rows[0]!.next_attempt_at).not.toBeNull()
          // Stop the ladder: the next retry dead-letters without a call.
          yield* webhooks.update(orgId, c.hook.id, { enabled: false })
        }
        for (const c of started) {
          yield* eventually(deliveryStatus(c.delivery), (d) =>
            d?.status === "dead_letter")
        }
      }).pipe(Effect.scoped))

    it.effect("pausing during retries: the next retry is dead_letter with no HTTP call", () =>
      Effect.gen(function*() {
        const webhooks = yield* Webhooks
        const orgId = makeOrgId()
        // The receiver holds its answer while the test pauses the webhook: the pause lands before
        // the first attempt fails, whatever the machine's load.
        const rx = yield* receiver(() => ({ status: 500, delayMs: 600 }))
        const hook = yield* createHook(orgId, rx.url)
        const { delivery_id } = yield* webhooks.test(orgId, hook.id)
        yield* Effect.promise(() => rx.waitFor(1))
        yield* webhooks.update(orgId, hook.id, { enabled: false })
        yield* eventually(deliveryStatus(delivery_id), (d) => d?.status === "dead_letter")
        const rows = yield* attemptRows(delivery_id)
        expect(rows.map((r) => [r.attempt, r.status, r.error, r.duration_ms])).toEqual([
          [1, "failed", "HTTP 500", rows[0]!.duration_ms],
          [2, "dead_letter", "not attempted: the webhook is paused", null]
        ])
        yield* Effect.sleep(700)
        expect(rx.received).toHaveLength(1)
        // A paused webhook's delivery can be retried by hand; it dead-letters again while paused.
        yield* webhooks.retry(orgId, hook.id, delivery_id)
        yield* eventually(attemptRows(delivery_id), (rows) => rows.length === 3 && rows[2]!.status === "dead_letter")
        expect(rx.received).toHaveLength(1)
      }).pipe(Effect.scoped))

    it.effect("deleting during retries: the next retry is dead_letter with no HTTP call; the API no longer shows it", () =>
      Effect.gen(function*() {
        const webhooks = yield* Webhooks
        const orgId = makeOrgId()
        const rx = yield* receiver(() => ({ status: 500, delayMs: 600 }))
        const hook = yield* createHook(orgId, rx.url)
        const { delivery_id } = yield* webhooks.test(orgId, hook.id)
        yield* Effect.promise(() => rx.waitFor(1))
        yield* webhooks.remove(orgId, hook.id)
        yield* eventually(deliveryStatus(delivery_id), (d) => d?.status === "dead_letter")
        const rows = yield* attemptRows(delivery_id)
        expect(rows.map((r) => [r.attempt, r.status, r.error])).toEqual([
          [1, "failed", "HTTP 500"],
          [2, "dead_letter", "not attempted: the webhook was deleted"]
        ])
        expect(rx.received).toHaveLength(1)
        for (
          const call of [
            webhooks.get(orgId, hook.id),
            webhooks.deliveries(orgId, hook.id, { limit: 50, offset: 0 }),
            webhooks.retry(orgId, hook.id, delivery_id),
            webhooks.remove(orgId, hook.id)
          ]
        ) {
          const exit = yield* Effect.exit(call as Effect.Effect<unknown, unknown>)
          assert(Exit.isFailure(exit))
          expect(JSON.stringify(exit.cause)).toContain("not_found")
        }
      }).pipe(Effect.scoped))

    it.effect("fan-out: each event to the org's enabled webhooks whose filter names it or is *, once", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const orgA = makeOrgId()
        const orgB = makeOrgId()
        const rx = yield* receiver(() => ({ status: 204 }))
        const all = yield* createHook(orgA, rx.url)
        const created = yield* createHook(orgA, rx.url, { events: ["sandbox.created"] })
        const template = yield* createHook(orgA, rx.url, { events: ["template.state_updated", "sandbox.deleted"] })
        const paused = yield* createHook(orgA, rx.url, { enabled: false })
        const other = yield* createHook(orgB, rx.url, { events: ["sandbox.created"] })
        const appendEvent = (orgId: string, event: string, data: Record<string, unknown>) =>
          sql.withTransaction(Outbox.appendEvent({ orgId, event, data }))
        yield* appendEvent(orgA, "sandbox.created", { sandbox_id: "sbx_1" })
        yield* appendEvent(orgA, "template.state_updated", { template_id: "tpl_1", state: "ready", image: null })
        yield* appendEvent(orgA, "org.usage_alert", { spend_micros: 1, alert_micros: 1 })
        // Not webhook events: a ping (only the test operation sends those) and an unknown name.
        yield* appendEvent(orgA, "ping", { webhook_id: all.id, message: "forged" })
        yield* appendEvent(orgA, "sandbox.exploded", {})
        yield* appendEvent(orgB, "sandbox.deleted", { sandbox_id: "sbx_2", host_id: null })

        // 3 for *, 1 for sandbox.created, 1 for template: 5 requests, and no more.
        yield* Effect.promise(() => rx.waitFor(5))
        yield* Effect.sleep(500)
        expect(rx.received).toHaveLength(5)
        const events = (id: string) => Effect.map(deliveriesOf(id), (ds) => ds.map((d) => d.event).sort())
        expect(yield* events(all.id)).toEqual(["org.usage_alert", "sandbox.created", "template.state_updated"])
        expect(yield* events(created.id)).toEqual(["sandbox.created"])
        expect(yield* events(template.id)).toEqual(["template.state_updated"])
        expect(yield* events(paused.id)).toEqual([])
        expect(yield* events(other.id)).toEqual([])
        // The body is the event's envelope as written.
        const createdBody = JSON.parse(
          rx.received.find((r) => r.headers["x-svc-delivery-webhook-id"] === created.id)!.body.toString()
        )
        expect(createdBody).toMatchObject({ event: "sandbox.created", org_id: orgA, data: { sandbox_id: "sbx_1" } })

        // A second fan-out reading EVENTS from the start (as after losing every ack) adds nothing.
        const replay = Context.get(
          yield* Layer.build(FanOut.layerWith({ consumerName: "webhook_fanout_replay" })),
          FanOut
        )
        // Four deliverable events (the ping and the unknown name are skipped); five jobs again.
        expect(yield* eventually(replay.stats, (s) => s.events >= 4)).toEqual({ events: 4, deliveries: 5 })
        yield* Effect.sleep(500)
        expect(yield* events(all.id)).toEqual(["org.usage_alert", "sandbox.created", "template.state_updated"])
        expect(yield* events(created.id)).toEqual(["sandbox.created"])
        expect(rx.received).toHaveLength(5)
      }).pipe(Effect.scoped))

    it.effect("a url changed just before an event, even with its notification lost: the delivery goes to the new url", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const webhooks = yield* Webhooks
        const orgId = makeOrgId()
        const receivers = [yield* receiver(() => ({ status: 204 })), yield* receiver(() => ({ status: 204 }))]
        const hook = yield* createHook(orgId, receivers[0]!.url)
        const emit = (n: number) =>
          sql.withTransaction(
            Outbox.appendEvent({ orgId, event: "org.usage_alert", data: { spend_micros: n, alert_micros: 1 } })
          )
        // The dispatcher has seen the webhook at its first url.
        yield* emit(0)
        yield* Effect.promise(() => receivers[0]!.waitFor(1))
        // Each round: change the url, emit at once; the event must reach the url just set. Odd
        // rounds change it behind the API's back, without the notification that refreshes the
        // dispatchers' copies (as when their LISTEN connection is reconnecting): the job's
        // webhook version, newer than the dispatcher's copy, sends it to read the row afresh.
        for (let round = 1; round <= 6; round++) {
          const target = receivers[round % 2]!
          const before = target.received.length
          if (round % 2 === 1) {
            yield* sql`UPDATE webhooks SET url = ${target.url}, updated_at = now() WHERE id = ${hook.id}`
          } else yield* webhooks.update(orgId, hook.id, { url: target.url })
          yield* emit(round)
          yield* Effect.promise(() => target.waitFor(before + 1))
        }
        yield* Effect.sleep(300)
        const spends = (i: number) =>
          receivers[i]!.received.map((r) => JSON.parse(r.body.toString()).data.spend_micros).sort()
        expect(spends(0)).toEqual([0, 2, 4, 6])
        expect(spends(1)).toEqual([1, 3, 5])
      }).pipe(Effect.scoped))

    it.effect("the secret column holds the secret sealed, never in plain text; deliveries are still signed with the secret", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const webhooks = yield* Webhooks
        const orgId = makeOrgId()
        const rx = yield* receiver()
        const own = "my-own-signing-secret-0123"
        const mine = yield* createHook(orgId, rx.url, { secret: own })
        const generated = yield* createHook(orgId, rx.url)
        for (const [hook, secret] of [[mine, own], [generated, generated.secret_returned_once]] as const) {
          const [row] = yield* sql<{ secret: string }>`SELECT secret FROM webhooks WHERE id = ${hook.id}`
          expect(row!.secret).not.toBe(secret)
          expect(row!.secret).not.toContain(secret)
          expect(row!.secret).not.toContain(secret.slice(6, 22))
          expect(row!.secret).toMatch(/^v1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/)
          // Nor any other column of the row.
          const dump = JSON.stringify(yield* sql`SELECT * FROM webhooks WHERE id = ${hook.id}`)
          expect(dump).not.toContain(secret)
          const { delivery_id } = yield* webhooks.test(orgId, hook.id)
          yield* eventually(deliveryStatus(delivery_id), (d) => d?.status === "succeeded")
          const request = rx.received.find((r) => r.headers["x-svc-delivery-id"] === delivery_id)!
          expect(signatureOk(secret, request)).toBe(true)
        }
        // Each row's sealed value is its own: the same plaintext seals differently.
        const again = yield* createHook(orgId, rx.url, { secret: own })
        const rows = yield* sql<{ secret: string }>`SELECT secret FROM webhooks WHERE id IN (${mine.id}, ${again.id})`
        expect(new Set(rows.map((r) => r.secret)).size).toBe(2)
      }).pipe(Effect.scoped))

    it.effect("the dispatcher pulls from a consumer per webhook, configured with max_deliver 6 and no backoff", () =>
      Effect.gen(function*() {
        const nats = yield* Nats
        const dispatcher = yield* WebhookDispatcher
        const orgId = makeOrgId()
        const rx = yield* receiver()
        const hook = yield* createHook(orgId, rx.url)
        yield* eventually(dispatcher.stats, (s) => s.webhooks.includes(hook.id))
        const info = yield* Effect.promise(() =>
          nats.jsm.consumers.info(nats.name("WEBHOOK_DELIVERY"), nats.name(`whd_${hook.id}`))
        )
        expect(info.config).toMatchObject({
          max_deliver: 6,
          ack_wait: 5_000_000_000,
          filter_subject: nats.subject("whd", hook.id, ">")
        })
        expect(info.config.backoff ?? []).toEqual([])
      }).pipe(Effect.scoped))
  })
})
