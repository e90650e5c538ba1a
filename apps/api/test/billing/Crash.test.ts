/**
 * The meter across kill -9 (docs/contract.md#billing): two runtime processes (`node
 * apps/runtime/src/main.ts`, each with its meter sampling every 100 ms) meter two running
 * sandboxes of a real agent; one is killed -9 mid-way and replaced, then the other. Through it
 * all every usage event reaches the webhook receiver exactly once, the org ends blocked with its
 * sandboxes stopped, and what was charged is exactly what ran: the period's spend equals the sum
 * of its runs' metered time at the prices (no second counted twice, none dropped), and every
 * run is metered to its end.
 */
import { expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import { eventually } from "@svc/testing/Eventually"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { kill, spawnRole } from "@svc/testing/TestProcess"
import { receiver } from "@svc/testing/WebhookReceiver"
import { WebhookSender } from "@svc/webhooks/Delivery/Attempt"
import { FanOut } from "@svc/webhooks/Delivery/FanOut"
import { WebhookDispatcher } from "@svc/webhooks/Delivery/WebhookDispatcher"
import { WebhookAddressGuard } from "@svc/webhooks/Subscriptions/AddressGuard"
import { ConfigProvider, Duration, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { SqlClient } from "effect/sql"
import { fileURLToPath } from "node:url"
import * as Server from "../../src/Server.ts"
import { call, Identity, makeHost, startAgent } from "../../testing/Sandboxes.ts"

const CPU_PRICE = 10_000
const LIMIT = 200_000
const ALERT = 50_000

const SETTINGS = {
  SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8",
  SVC_WEBHOOK_RETRY_SCHEDULE: "300ms,300ms,300ms,300ms,300ms"
}
const settings = ConfigProvider.layerAdd(ConfigProvider.fromUnknown(SETTINGS), { asPrimary: true })

const Platform = Layer.mergeAll(
  Identity.layer,
  Layer.mergeAll(FanOut.layer, WebhookDispatcher.layer).pipe(
    Layer.provide(WebhookSender.layer),
    Layer.provide(WebhookAddressGuard.layer),
    Layer.provide(settings)
  )
).pipe(Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer)))

const runtimeMain = fileURLToPath(new URL("../../../runtime/src/main.ts", import.meta.url))

layer(Platform, { excludeTestServices: true })("the meter across kill -9", (it) => {
  it.effect(
    "two runtimes, each killed -9 in turn: every usage event once, spend equal to the metered time, every run metered to its end",
    () =>
      Effect.gen(function*() {
        const nats = yield* TestNats.TestNatsServer
        const databaseUrl = yield* TestDatabase.TestDatabaseUrl
        const sql = yield* SqlClient.SqlClient
        const runtime = spawnRole({
          main: runtimeMain,
          env: {
            DATABASE_URL: databaseUrl,
            NATS_URL: nats.url,
            SVC_NATS_PREFIX: nats.prefix,
            SVC_METER_INTERVAL: "100ms",
            SVC_PRICE_CPU_MICROS_PER_SECOND: String(CPU_PRICE),
            SVC_PRICE_RAM_GIB_MICROS_PER_SECOND: "0",
            // A message held by a killed process comes back soon.
            SVC_ACTOR_ACK_WAIT: "1s",
            SVC_SUPERVISOR_INTERVAL: "200ms"
          },
          ready: (s) => (s.includes("runtime ready") ? true : undefined),
          timeout: Duration.seconds(90)
        })
        const [first, second] = yield* Effect.all([runtime, runtime], { concurrency: "unbounded" })
        const base = yield* serve(
          HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(Layer.provide(settings))
        )
        const host = yield* makeHost
        yield* startAgent(host, { region: "local" })
        const o = yield* (yield* Identity).org("billing-crash")
        const api = (method: string, path: string, body?: unknown) =>
          call(base, method, path, { token: o.token, ...(body !== undefined ? { body } : {}) })
        const spend = Effect.map(api("GET", "/v1/billing/usage"), (r) => r.json as Record<string, any>)

        const rx = yield* receiver()
        const hook = yield* api("POST", "/v1/webhooks", {
          url: rx.url,
          events: ["org.usage_alert", "org.usage_limit_reached", "sandbox.state_updated"]
        })
        expect(hook.status, hook.text).toBe(201)
        expect((yield* api("PUT", "/v1/billing/limits", { hard_limit_micros: LIMIT, alert_micros: ALERT })).status)
          .toBe(200)

        const ids: Array<string> = []
        for (const name of ["one", "two"]) {
          const res = yield* api("POST", "/v1/sandboxes", { name, cpu: 1, ram_mb: 256 })
          expect(res.status, res.text).toBe(201)
          ids.push(res.json.id)
        }
        for (const id of ids) {
          yield* eventually(
            api("GET", `/v1/sandboxes/${id}`),
            (r) => r.json?.state === "running",
            Duration.seconds(60),
            Duration.millis(200)
          )
        }

        // Two sandboxes at 10 000 micros a second each: the limit in about 10 s. The first meter
        // dies at a third of it, and a new one starts; the second dies at two thirds.
        yield* eventually(spend, (u) => u.spend_micros >= LIMIT / 3, Duration.seconds(60), Duration.millis(100))
        yield* kill(first.process)
        const third = yield* runtime
        yield* eventually(spend, (u) => u.spend_micros >= (2 * LIMIT) / 3, Duration.seconds(60), Duration.millis(100))
        yield* kill(second.process)
        const blocked = yield* eventually(spend, (u) => u.blocked === true, Duration.seconds(60), Duration.millis(100))
        expect(blocked.spend_micros).toBeGreaterThanOrEqual(LIMIT)

        // Blocked: no create; the meters stop both sandboxes.
        const refused = yield* api("POST", "/v1/sandboxes", { name: "three" })
        expect(refused.status, refused.text).toBe(402)
        expect(refused.json.code).toBe("usage_limit_reached")
        for (const id of ids) {
          yield* eventually(
            api("GET", `/v1/sandboxes/${id}`),
            (r) => r.json?.state === "stopped",
            Duration.seconds(60),
            Duration.millis(200)
          )
        }

        // Every run ended and metered to its end (a sample or two after the stops).
        const runs = yield* eventually(
          sql<{ open: number; unmetered: number; runs: number }>`
            SELECT count(*) FILTER (WHERE ended_at IS NULL)::int AS open,
                   count(*) FILTER (WHERE metered_until < ended_at)::int AS unmetered,
                   count(*)::int AS runs
            FROM billing_runs WHERE org_id = ${o.id}`,
          (rows) => rows[0]!.open === 0 && rows[0]!.unmetered === 0,
          Duration.seconds(30),
          Duration.millis(100)
        )
        expect(runs[0]!.runs).toBe(2)
        // What was charged is exactly the metered time at the price (units: 1/1,024,000 micro).
        const [totals] = yield* sql<{ charged: string; metered: string }>`
          SELECT (SELECT sum(spend_units) FROM billing_periods WHERE org_id = ${o.id})::text AS charged,
                 (SELECT sum(round(extract(epoch FROM metered_until - started_at) * 1000) * 1024 * cpu * ${CPU_PRICE})
                  FROM billing_runs WHERE org_id = ${o.id})::text AS metered`
        expect(totals!.charged).toBe(totals!.metered)
        const final = yield* spend
        expect(BigInt(final.spend_micros)).toBe(BigInt(totals!.charged) / 1_024_000n)

        // Each event once, in order of the spend, blocked only at or over the limit.
        const delivered = yield* eventually(
          Effect.sync(() => rx.received.map((r) => JSON.parse(r.body.toString("utf8")))),
          (es) =>
            es.some((e) => e.data?.pct === 100) &&
            ids.every((id) => es.some((e) => e.data?.sandbox_id === id && e.data?.state === "stopped")),
          Duration.seconds(30),
          Duration.millis(100)
        )
        // Late copies would arrive meanwhile.
        yield* Effect.sleep(Duration.seconds(1))
        const usage = rx.received.map((r) => JSON.parse(r.body.toString("utf8"))).filter((e) =>
          e.event.startsWith("org.")
        )
        expect(delivered.length).toBeGreaterThan(0)
        const alerts = usage.filter((e) => e.event === "org.usage_alert")
        expect(alerts.length).toBe(1)
        expect(alerts[0].data.alert_micros).toBe(ALERT)
        expect(alerts[0].data.spend_micros).toBeGreaterThanOrEqual(ALERT)
        const limits = usage.filter((e) => e.event === "org.usage_limit_reached").sort((a, b) =>
          a.data.pct - b.data.pct
        )
        expect(limits.map((e) => e.data.pct)).toEqual([50, 80, 90, 100])
        for (const e of limits) {
          expect(e.data.limit_micros).toBe(LIMIT)
          expect(e.data.spend_micros * 100).toBeGreaterThanOrEqual(e.data.pct * LIMIT)
          expect(e.data.spend_micros).toBeLessThanOrEqual(final.spend_micros)
          expect(e.data.blocked).toBe(e.data.spend_micros >= LIMIT)
        }
        expect(limits[3].data.blocked).toBe(true)
        yield* kill(third.process)
      }).pipe(Effect.scoped),
    240_000
  )
})
