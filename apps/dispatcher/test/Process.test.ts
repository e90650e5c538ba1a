/**
 * Dispatcher processes (`node apps/dispatcher/src/main.ts`) against a real Postgres, NATS and an
 * HTTP receiver: killed with SIGKILL while the receiver holds a request, the job comes back to
 * another dispatcher after ack_wait and completes, one attempt row per request received; killed
 * on the last attempt, the server's MAX_DELIVERIES advisory dead-letters it; killed during a first
 * attempt made from an event (no row until its result), the job comes back and completes; and with the
 * default configuration, the 5 s deadline and the first rung of the 30 s ladder.
 */
import { expect, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import { makeOrgId } from "@svc/domain/Ids"
import * as Outbox from "@svc/events/Outbox"
import { OutboxRelay } from "@svc/events/Relay"
import { eventually } from "@svc/testing/Eventually"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { spawnRole } from "@svc/testing/TestProcess"
import { testEncryptionKeys } from "@svc/testing/TestSecrets"
import { attemptRows, deliveriesOf, deliveryStatus } from "@svc/testing/WebhookDeliveries"
import { receiver } from "@svc/testing/WebhookReceiver"
import { LOST_ATTEMPT_ERROR } from "@svc/webhooks/Delivery/DeliveryStates"
import { WebhookAddressGuard } from "@svc/webhooks/Subscriptions/AddressGuard"
import { Webhooks } from "@svc/webhooks/Subscriptions/Webhooks"
import { ConfigProvider, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"

const MAIN = NodePath.resolve(NodePath.dirname(fileURLToPath(import.meta.url)), "../src/main.ts")

const FAST: Record<string, string> = {
  SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8",
  SVC_WEBHOOK_RETRY_SCHEDULE: "300ms,300ms,300ms,300ms,300ms",
  // Long enough that a loaded machine's pauses never let a held job expire (which would make a
  // third call), short enough that a killed dispatcher's job comes back quickly.
  SVC_WEBHOOK_ACK_WAIT: "5s",
  SVC_WEBHOOK_DISCOVERY_INTERVAL: "1s"
}

/** This process: the API side (create, test) and the outbox relay. Dispatchers (fan-out and delivery) are children. */
const testLayer = Layer.mergeAll(
  Webhooks.layer.pipe(Layer.provide(WebhookAddressGuard.layer)),
  OutboxRelay.layerWith({ pollInterval: Duration.millis(200) })
).pipe(
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer)),
  // The children get the same SVC_ENCRYPTION_KEYS from spawnRole: they open what this process sealed.
  Layer.provide(
    ConfigProvider.layer(
      ConfigProvider.fromEnv({
        env: { SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8", SVC_ENCRYPTION_KEYS: testEncryptionKeys() }
      })
    )
  )
)

/** A dispatcher process, ready once it prints its `dispatcher_ready` line. */
const spawnDispatcher = (env: Record<string, string>) =>
  Effect.gen(function*() {
    const server = yield* TestNats.TestNatsServer
    const databaseUrl = yield* TestDatabase.TestDatabaseUrl
    return yield* spawnRole({
      main: MAIN,
      env: { DATABASE_URL: databaseUrl, NATS_URL: server.url, SVC_NATS_PREFIX: server.prefix, ...env },
      ready: (stdout) => (stdout.includes(`"event":"dispatcher_ready"`) ? true : undefined),
      timeout: Duration.seconds(30)
    })
  })

type Child = Effect.Success<ReturnType<typeof spawnDispatcher>>

/** What a failing run needs to be understood: rows, consumers, the children's output. */
const diagnose = (deliveryId: string, received: number, children: ReadonlyArray<Child>) =>
  Effect.gen(function*() {
    const nats = yield* Nats
    const lines = [`rows ${JSON.stringify(yield* attemptRows(deliveryId))}`, `requests received ${received}`]
    yield* Effect.promise(async () => {
      for await (const c of nats.jsm.consumers.list(nats.name("WEBHOOK_DELIVERY"))) {
        lines.push(
          `consumer ${c.name} pending=${c.num_pending} ack_pending=${c.num_ack_pending} waiting=${c.num_waiting} redelivered=${c.num_redelivered}`
        )
      }
    })
    children.forEach((child, i) => lines.push(`dispatcher ${i + 1} output:\n${child.output()}`))
    console.error(lines.join("\n"))
  })

const kill9 = (child: Child) =>
  Effect.promise(async () => {
    child.process.kill("SIGKILL")
    await child.exited
  })

const createAndPing = (url: string) =>
  Effect.gen(function*() {
    const webhooks = yield* Webhooks
    const orgId = makeOrgId()
    const created = yield* webhooks.create(orgId, {
      url,
      events: ["*"],
      enabled: true,
      secret: "process-test-secret-1"
    })
    if (created._tag !== "Created") return yield* Effect.die("not created")
    const hook = created.value
    const { delivery_id } = yield* webhooks.test(orgId, hook.id)
    return { hook, deliveryId: delivery_id }
  })

layer(testLayer, { excludeTestServices: true, timeout: 90_000 })("dispatcher processes", (it) => {
  it.effect("kill -9 while the receiver holds the request: the job comes back to another dispatcher and completes once", () =>
    Effect.gen(function*() {
      const rx = yield* receiver((_request, n) => (n === 1 ? "hang" : { status: 200 }))
      const first = yield* spawnDispatcher(FAST)
      const { deliveryId } = yield* createAndPing(rx.url)
      yield* Effect.promise(() => rx.waitFor(1))
      // The attempt row is written before the call: it is there, pending, while we kill.
      expect((yield* attemptRows(deliveryId)).map((r) => [r.attempt, r.status])).toEqual([[1, "pending"]])
      yield* kill9(first)
      const second = yield* spawnDispatcher(FAST)

      yield* eventually(deliveryStatus(deliveryId), (d) => d?.status === "succeeded", 20_000).pipe(
        Effect.tapCause(() => diagnose(deliveryId, rx.received.length, [first, second]))
      )
      // Give a stray extra delivery time to show up: there must be none.
      yield* Effect.sleep(1_500)
      expect(rx.received).toHaveLength(2)
      const [a, b] = rx.received
      expect(b!.body.equals(a!.body)).toBe(true)
      expect(b!.headers["x-svc-delivery-id"]).toBe(deliveryId)
      expect(b!.headers["x-svc-signature"]).toBe(a!.headers["x-svc-signature"])
      const rows = yield* attemptRows(deliveryId)
      expect(rows.map((r) => [r.attempt, r.status, r.response_code, r.error])).toEqual([
        [1, "failed", null, LOST_ATTEMPT_ERROR],
        [2, "succeeded", 200, null]
      ])
      // One attempt row per request the receiver saw.
      expect(rows).toHaveLength(rx.received.length)
    }).pipe(Effect.scoped))

  it.effect("kill -9 during a first attempt made from an event (no row until its result): the job comes back and completes; the cut call leaves no row", () =>
    Effect.gen(function*() {
      const rx = yield* receiver((_request, n) => (n === 1 ? "hang" : { status: 200 }))
      const first = yield* spawnDispatcher(FAST)
      const webhooks = yield* Webhooks
      const orgId = makeOrgId()
      const created = yield* webhooks.create(orgId, {
        url: rx.url,
        events: ["*"],
        enabled: true,
        secret: "process-test-secret-1"
      })
      if (created._tag !== "Created") return yield* Effect.die("not created")
      const sql = yield* SqlClient.SqlClient
      // A real event through the outbox and the fan-out (the dispatcher's): its job carries the body.
      yield* sql.withTransaction(
        Outbox.appendEvent({ orgId, event: "org.usage_alert", data: { spend_micros: 7, alert_micros: 5 } })
      )
      yield* Effect.promise(() => rx.waitFor(1))
      const [delivery] = yield* deliveriesOf(created.value.id)
      // The first attempt is made before any row is written: none while the receiver holds it.
      expect(yield* attemptRows(delivery!.id)).toEqual([])
      yield* kill9(first)
      const second = yield* spawnDispatcher(FAST)

      yield* eventually(deliveryStatus(delivery!.id), (d) => d?.status === "succeeded", 20_000).pipe(
        Effect.tapCause(() => diagnose(delivery!.id, rx.received.length, [first, second]))
      )
      yield* Effect.sleep(1_500)
      if (rx.received.length !== 2) yield* diagnose(delivery!.id, rx.received.length, [first, second])
      expect(rx.received).toHaveLength(2)
      const [a, b] = rx.received
      expect(b!.body.equals(a!.body)).toBe(true)
      expect(JSON.parse(a!.body.toString("utf8"))).toMatchObject({
        event: "org.usage_alert",
        org_id: orgId,
        data: { spend_micros: 7, alert_micros: 5 }
      })
      expect(b!.headers["x-svc-signature"]).toBe(a!.headers["x-svc-signature"])
      expect(b!.headers["x-svc-delivery-id"]).toBe(delivery!.id)
      // The call cut short left no result and no row (a first attempt's row is written with its
      // result); the one that completed is attempt 1.
      const rows = yield* attemptRows(delivery!.id)
      expect(rows.map((r) => [r.attempt, r.status, r.response_code, r.error])).toEqual([[1, "succeeded", 200, null]])
    }).pipe(Effect.scoped))

  it.effect("kill -9 during the sixth attempt: the MAX_DELIVERIES advisory makes the delivery dead_letter", () =>
    Effect.gen(function*() {
      const nats = yield* Nats
      const rx = yield* receiver((_request, n) => (n < 6 ? { status: 500 } : "hang"))
      // One dispatcher, whose sixth attempt hangs (a long deadline, so it is still hanging when killed).
      const slow = { ...FAST, SVC_WEBHOOK_ATTEMPT_TIMEOUT: "60s" }
      const first = yield* spawnDispatcher(slow)
      const { hook, deliveryId } = yield* createAndPing(rx.url)
      yield* Effect.promise(() => rx.waitFor(6, 20_000))
      yield* eventually(attemptRows(deliveryId), (rows) => rows.length === 6 && rows[5]!.status === "pending")
      // A second dispatcher, there to hear the advisory; the server will not deliver the job again.
      yield* spawnDispatcher(slow)
      yield* kill9(first)
      yield* eventually(deliveryStatus(deliveryId), (d) => d?.status === "dead_letter", 20_000)
      const rows = yield* attemptRows(deliveryId)
      expect(rows.map((r) => [r.attempt, r.status])).toEqual([
        [1, "failed"],
        [2, "failed"],
        [3, "failed"],
        [4, "failed"],
        [5, "failed"],
        [6, "dead_letter"]
      ])
      expect(rows[5]!.error).toBe(LOST_ATTEMPT_ERROR)
      expect(rx.received).toHaveLength(6)
      // The job the server gave up on was removed from the work queue.
      const info = yield* Effect.promise(() =>
        nats.jsm.consumers.info(nats.name("WEBHOOK_DELIVERY"), nats.name(`whd_${hook.id}`))
      )
      expect(info.num_pending + info.num_ack_pending).toBe(0)
    }).pipe(Effect.scoped))

  it.effect("default configuration: a receiver answering after 6 s fails at the 5 s deadline; next attempt 30 s later; consumer max_deliver 6, ack_wait 30 s", () =>
    Effect.gen(function*() {
      const nats = yield* Nats
      const rx = yield* receiver(() => ({ status: 200, delayMs: 6_000 }))
      yield* spawnDispatcher({ SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8" })
      const { hook, deliveryId } = yield* createAndPing(rx.url)
      const rows = yield* eventually(attemptRows(deliveryId), (rows) => rows[0]?.status === "failed", 20_000)
      const [row] = rows
      expect(row).toMatchObject({ attempt: 1, status: "failed", response_code: null, error: "timeout after 5000 ms" })
      expect(row!.duration_ms).toBeGreaterThanOrEqual(5_000)
      // next_attempt_at is set when the result is written, at the end of the 5 s attempt.
      const wait = row!.next_attempt_at!.getTime() - row!.created_at.getTime() - row!.duration_ms!
      expect(wait).toBeGreaterThanOrEqual(30_000 - 50)
      expect(wait).toBeLessThan(32_000)
      const info = yield* Effect.promise(() =>
        nats.jsm.consumers.info(nats.name("WEBHOOK_DELIVERY"), nats.name(`whd_${hook.id}`))
      )
      expect(info.config).toMatchObject({ max_deliver: 6, ack_wait: 30_000_000_000, max_ack_pending: 1000 })
      expect(info.config.backoff ?? []).toEqual([])
      // The job waits for its second attempt, holding this webhook's slot only.
      expect(info.num_ack_pending).toBe(1)
      expect(rx.received).toHaveLength(1)
    }).pipe(Effect.scoped))
})
