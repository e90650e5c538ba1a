/**
 * Usage, limits and billing events through the public API (docs/contract.md#billing), on a real
 * Postgres and NATS, the runtime role (its actors, relay and supervisor; its own meter off), a
 * real agent in region `local`, a webhook dispatcher delivering to a receiver on 127.0.0.1, and
 * meters built here on a clock the test sets (their samples are what moves time for billing):
 *
 * - spend to the micro at set prices, across samples of any length, a month's end and the next
 *   period;
 * - the limits routes' refusals (bad values, scoped keys) and their audit entry;
 * - with two meters sampling at once and a third interrupted mid-sample, every threshold event
 *   exactly once, with its exact fields, delivered signed to the webhook; at 100 % the org's
 *   creates and starts are 402 and its running sandbox is stopped (its events delivered); the
 *   next period and a raised limit unblock, and the raised limit re-arms the thresholds above
 *   the spend.
 *
 * The platform's wall clock (the API's and the runtime's: the period of "now", the sandboxes'
 * start times) is `platform`: the real one, moved back when the run starts near a month's end so
 * that every test's timeline, which runs minutes ahead of it, stays inside one period whatever
 * the date. One API runs ahead of it, in the next period. The meters' times stay within minutes
 * of the platform's (the first test's hour ahead is cut at the period by `expected`).
 */
import { expect, layer } from "@effect/vitest"
import { Meter } from "@svc/billing/Billing/Meter"
import { periodOf } from "@svc/billing/Billing/Period"
import { toMicros, unitsFor } from "@svc/billing/Billing/Pricing"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Runtime from "@svc/runtime/Runtime"
import { makeOffsetClock } from "@svc/testing/OffsetClock"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { receiver } from "@svc/testing/WebhookReceiver"
import { WebhookSender } from "@svc/webhooks/Delivery/Attempt"
import { FanOut } from "@svc/webhooks/Delivery/FanOut"
import { WebhookDispatcher } from "@svc/webhooks/Delivery/WebhookDispatcher"
import { WebhookAddressGuard } from "@svc/webhooks/Subscriptions/AddressGuard"
import { Clock, ConfigProvider, Context, Duration, Effect, Fiber, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { execFile } from "node:child_process"
import { createHmac } from "node:crypto"
import * as NodePath from "node:path"
import * as Server from "../../src/Server.ts"
import { call, eventually, Identity, makeHost, startAgent } from "../../testing/Sandboxes.ts"

const CLI = NodePath.resolve(import.meta.dirname, "../../../cli/src/main.ts")

/** `svc <args>` as a user runs it, against `base` with `token`. */
const svc = (base: string, token: string, args: ReadonlyArray<string>) =>
  Effect.promise(() =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, [CLI, ...args], {
        env: { ...process.env, SVC_API_URL: base, SVC_API_KEY: token }
      }, (error, stdout, stderr) => resolve({ code: error ? (error.code as number) ?? 1 : 0, stdout, stderr }))
    })
  )

const PRICES = { cpuMicrosPerSecond: 1000, ramGibMicrosPerSecond: 333 }

const SETTINGS = {
  SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8",
  SVC_WEBHOOK_RETRY_SCHEDULE: "300ms,300ms,300ms,300ms,300ms",
  SVC_RATE_LIMIT_PER_SECOND: "100000",
  SVC_RATE_LIMIT_BURST: "100000"
}
const settings = ConfigProvider.layerAdd(ConfigProvider.fromUnknown(SETTINGS), { asPrimary: true })

/**
 * How far the meters may run ahead of the platform's clock in this file (the threshold test's
 * 4 minutes, with room for a slow run): when the run starts closer than this to a month's end,
 * the platform's clock goes back by twice as much, inside the same month.
 */
const MONTH_END_MARGIN_MS = 60 * 60_000
const platform = makeOffsetClock()
{
  const now = Date.now()
  if (periodOf(now).end - now < MONTH_END_MARGIN_MS) platform.advance(-2 * MONTH_END_MARGIN_MS)
}
const platformNow = () => platform.clock.currentTimeMillisUnsafe()

/** A wall clock the test sets; sleeping stays real. */
const settableClock = () => {
  const real = Clock.Clock.defaultValue()
  let now = 0
  const clock: Clock.Clock = {
    currentTimeMillisUnsafe: () => now,
    currentTimeMillis: Effect.sync(() => now),
    currentTimeNanosUnsafe: () => BigInt(now) * 1_000_000n,
    currentTimeNanos: Effect.sync(() => BigInt(now) * 1_000_000n),
    monotonicTimeNanosUnsafe: () => real.monotonicTimeNanosUnsafe(),
    monotonicTimeNanos: real.monotonicTimeNanos,
    sleep: (duration) => real.sleep(duration)
  }
  return { clock, set: (ms: number) => void (now = ms) }
}

class Env extends Context.Service<Env, {
  readonly base: string
  /** An API whose clock runs ahead by what `ahead.advance` added. */
  readonly later: string
  readonly ahead: ReturnType<typeof makeOffsetClock>
}>()("test/Billing/Env") {}

const api = (clock: Clock.Clock) =>
  serve(
    HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provide(settings),
      Layer.provide(Layer.succeed(Clock.Clock, clock))
    )
  )

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const base = yield* api(platform.clock)
    // The platform's clock, moved further by the tests.
    const ahead = makeOffsetClock()
    ahead.advance(platformNow() - Date.now())
    const later = yield* api(ahead.clock)
    const host = yield* makeHost
    yield* startAgent(host, { region: "local" })
    return { base, later, ahead }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(
    Runtime.make({ meter: false, supervisor: { intervalMs: 200 } }).pipe(
      Layer.provide(Layer.succeed(Clock.Clock, platform.clock))
    ),
    Identity.layer,
    // The dispatcher role's parts: events to deliveries, deliveries to the receiver.
    Layer.mergeAll(FanOut.layer, WebhookDispatcher.layer).pipe(
      Layer.provide(WebhookSender.layer),
      Layer.provide(WebhookAddressGuard.layer),
      Layer.provide(settings)
    )
  )),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

/** `n` meters on `clock` at PRICES, sampling only when told (their loop waits an hour). */
const meters = (clock: Clock.Clock, n: number) =>
  Effect.forEach(Array.from({ length: n }), () =>
    Effect.map(
      Layer.build(
        Meter.layer({ intervalMs: 3_600_000, prices: PRICES }).pipe(Layer.provide(Layer.succeed(Clock.Clock, clock)))
      ),
      (context) => Context.get(context, Meter)
    ))

const org = (name: string) =>
  Effect.gen(function*() {
    const env = yield* Env
    const created = yield* (yield* Identity).org(name)
    const as = (base: string) => (method: string, path: string, body?: unknown) =>
      call(base, method, path, { token: created.token, ...(body !== undefined ? { body } : {}) })
    return { ...created, api: as(env.base), later: as(env.later) }
  })

type Api = (method: string, path: string, body?: unknown) => ReturnType<typeof call>

const waitState = (api: Api, id: string, state: string) =>
  Effect.map(
    eventually(api("GET", `/v1/sandboxes/${id}`), (r) => r.json?.state === state || r.json?.state === "error"),
    (r) => {
      expect(r.json.state, r.text).toBe(state)
      return r.json as Record<string, any>
    }
  )

const expectError = (res: { status: number; json: any; text: string }, status: number, code: string) => {
  expect(res.status, res.text).toBe(status)
  expect(res.json.code, res.text).toBe(code)
}

interface Run {
  readonly cpu: number
  readonly ramMb: number
  readonly start: number
  end: number
}

/** What runs charged until `at` cost in the period starting at `periodStart`, exactly. */
const expected = (runs: ReadonlyArray<Run>, at: number, periodStart: number) => {
  const period = periodOf(periodStart)
  let units = 0n
  for (const r of runs) {
    const ms = Math.min(at, r.end, period.end) - Math.max(r.start, period.start)
    if (ms > 0) units += unitsFor(PRICES, r.cpu, r.ramMb, ms)
  }
  return Number(toMicros(units))
}

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("billing", (it) => {
  it.effect("spend accrues at the set prices to the micro, whatever the samples; a month's end splits it; the next period starts at 0", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const o = yield* org("billing-meter")
      const clock = settableClock()
      const [meter] = yield* meters(clock.clock, 1)
      const usage = Effect.map(o.api("GET", "/v1/billing/usage"), (r) => {
        expect(r.status, r.text).toBe(200)
        return r.json
      })

      const now = periodOf(platformNow())
      expect(yield* usage).toEqual({
        period_start: new Date(now.start).toISOString(),
        period_end: new Date(now.end).toISOString(),
        spend_micros: 0,
        hard_limit_micros: null,
        alert_micros: null,
        blocked: false
      })

      const a = yield* o.api("POST", "/v1/sandboxes", { name: "big", cpu: 2, ram_mb: 768 })
      const b = yield* o.api("POST", "/v1/sandboxes", { name: "small", cpu: 1, ram_mb: 256 })
      expect([a.status, b.status]).toEqual([201, 201])
      const ra = yield* waitState(o.api, a.json.id, "running")
      const rb = yield* waitState(o.api, b.json.id, "running")
      const runs: Array<Run> = [
        { cpu: 2, ramMb: 768, start: Date.parse(ra.startedAt), end: Infinity },
        { cpu: 1, ramMb: 256, start: Date.parse(rb.startedAt), end: Infinity }
      ]
      const t0 = Math.max(runs[0]!.start, runs[1]!.start)
      let metered = 0
      const sampleAt = (ms: number) =>
        Effect.gen(function*() {
          clock.set(ms)
          metered = Math.max(metered, ms)
          yield* meter!.sample
        })
      const spendNow = Effect.map(usage, (u) => u.spend_micros as number)

      // Odd lengths, two samples at one time, and a sample behind the last (a slower clock).
      yield* sampleAt(t0 + 1_234)
      expect(yield* spendNow).toBe(expected(runs, metered, now.start))
      expect(yield* spendNow).toBeGreaterThan(0)
      yield* sampleAt(t0 + 61_001)
      yield* sampleAt(t0 + 61_001)
      yield* sampleAt(t0 + 5_000)
      expect(yield* spendNow).toBe(expected(runs, metered, now.start))
      yield* sampleAt(t0 + 600_000)
      expect(yield* spendNow).toBe(expected(runs, metered, now.start))

      // A stopped sandbox costs nothing more (it was metered to a time after its stop already).
      expect((yield* o.api("POST", `/v1/sandboxes/${b.json.id}/stop`)).status).toBe(202)
      yield* waitState(o.api, b.json.id, "stopped")
      runs[1]!.end = t0 + 600_000
      yield* sampleAt(t0 + 3_600_007)
      expect(yield* spendNow).toBe(expected(runs, metered, now.start))

      // Past the month's end: the current period gets what ran before it, the next what ran after.
      yield* sampleAt(Math.max(metered, now.end) + 5_003)
      expect(yield* spendNow).toBe(expected(runs, metered, now.start))
      const shift = now.end + 60_000 - platformNow()
      env.ahead.advance(shift)
      const next = yield* o.later("GET", "/v1/billing/usage")
      expect(next.json).toEqual({
        period_start: new Date(now.end).toISOString(),
        period_end: new Date(periodOf(now.end).end).toISOString(),
        spend_micros: expected(runs, metered, now.end),
        hard_limit_micros: null,
        alert_micros: null,
        blocked: false
      })
      expect(next.json.spend_micros).toBeGreaterThan(0)
      env.ahead.advance(-shift)

      for (const s of [a, b]) yield* o.api("DELETE", `/v1/sandboxes/${s.json.id}`)
      yield* waitState(o.api, a.json.id, "deleted")
    }).pipe(Effect.scoped))

  it.effect("limits: set, kept, removed; refusals for bad values and scoped keys; an audit entry", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const o = yield* org("billing-limits")
      const set = yield* o.api("PUT", "/v1/billing/limits", { hard_limit_micros: 5_000_000, alert_micros: 1_000_000 })
      expect(set.status, set.text).toBe(200)
      expect(set.json).toMatchObject({ spend_micros: 0, hard_limit_micros: 5_000_000, alert_micros: 1_000_000 })
      expect(set.json.blocked).toBe(false)
      // Omitted: kept; null: removed.
      const kept = yield* o.api("PUT", "/v1/billing/limits", { alert_micros: null })
      expect(kept.json).toMatchObject({ hard_limit_micros: 5_000_000, alert_micros: null })
      expect((yield* o.api("PUT", "/v1/billing/limits", {})).json).toMatchObject({
        hard_limit_micros: 5_000_000,
        alert_micros: null
      })
      expect((yield* o.api("GET", "/v1/billing/usage")).json).toMatchObject({ hard_limit_micros: 5_000_000 })

      for (
        const bad of [
          { hard_limit_micros: -1 },
          { hard_limit_micros: 1.5 },
          { hard_limit_micros: "100" },
          { alert_micros: 2 ** 53 },
          { hard_limit_micros: true }
        ]
      ) {
        const res = yield* o.api("PUT", "/v1/billing/limits", bad)
        expectError(res, 400, "invalid_request")
        expect(res.json.issues[0].path).toBe(Object.keys(bad)[0])
      }
      expectError(yield* o.api("PUT", "/v1/billing/limits", "[1,2"), 400, "invalid_request")
      expect((yield* o.api("GET", "/v1/billing/usage")).json).toMatchObject({ hard_limit_micros: 5_000_000 })

      // Account-level: a scoped key is refused, no key is 401; another org sees its own figures.
      const scoped = yield* (yield* Identity).key(o.id, ["sandboxes:write", "secrets:read"])
      expectError(yield* call(env.base, "GET", "/v1/billing/usage", { token: scoped }), 403, "full_access_required")
      expectError(
        yield* call(env.base, "PUT", "/v1/billing/limits", { token: scoped, body: { hard_limit_micros: 1 } }),
        403,
        "full_access_required"
      )
      expectError(yield* call(env.base, "GET", "/v1/billing/usage"), 401, "unauthenticated")
      const other = yield* org("billing-limits-other")
      expect((yield* other.api("GET", "/v1/billing/usage")).json).toMatchObject({ hard_limit_micros: null })

      const removed = yield* o.api("PUT", "/v1/billing/limits", { hard_limit_micros: null })
      expect(removed.json).toMatchObject({ hard_limit_micros: null, alert_micros: null, blocked: false })
      const audit = yield* o.api("GET", "/v1/audit?action=billing.limits_updated")
      expect(audit.json.total).toBe(4)
      expect(audit.json.entries[0]).toMatchObject({ action: "billing.limits_updated", target_id: o.id })
    }))

  it.effect("two meters and one interrupted mid-sample: each threshold once with its fields, delivered signed; at 100 % 402 and the sandbox stopped; the next period and a raised limit unblock", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const o = yield* org("billing-thresholds")
      const rx = yield* receiver()
      const hook = yield* o.api("POST", "/v1/webhooks", {
        url: rx.url,
        events: ["org.usage_alert", "org.usage_limit_reached", "sandbox.state_updated"]
      })
      expect(hook.status, hook.text).toBe(201)
      const secret = hook.json.secret_returned_once as string
      const limits = yield* o.api("PUT", "/v1/billing/limits", { hard_limit_micros: 100_000, alert_micros: 30_000 })
      expect(limits.json).toMatchObject({ spend_micros: 0, hard_limit_micros: 100_000, blocked: false })

      const clock = settableClock()
      const [one, two, three] = yield* meters(clock.clock, 3)
      const created = yield* o.api("POST", "/v1/sandboxes", { name: "spender", cpu: 1, ram_mb: 1024 })
      const id = created.json.id as string
      const t0 = Date.parse((yield* waitState(o.api, id, "running")).startedAt)
      const usage = Effect.map(o.api("GET", "/v1/billing/usage"), (r) => r.json)
      // 1 vCPU and 1 GiB: 1333 micros a second; samples every 2.5 s of its time.
      const spendAfter = (ms: number) => Math.floor((ms * 1333) / 1000)
      const STEP = 2_500

      let steps = 0
      for (;;) {
        steps++
        clock.set(t0 + steps * STEP)
        // A third meter's sample, interrupted after 0 to 4 ms: wherever it stops, it took nothing.
        const cut = yield* Effect.forkChild(three!.sample)
        yield* Effect.sleep(Duration.millis(steps % 5))
        yield* Fiber.interrupt(cut)
        yield* Effect.all([one!.sample, two!.sample], { concurrency: "unbounded" })
        if ((yield* usage).blocked) break
        expect(steps).toBeLessThan(40)
      }
      // 100 000 micros take 75.02 s: the 31st sample (77.5 s) blocks.
      expect(steps).toBe(31)
      const spend = spendAfter(steps * STEP)
      expect(yield* usage).toMatchObject({ spend_micros: spend, hard_limit_micros: 100_000, blocked: true })

      // Blocked: creates and starts are 402; the meters stopped the running sandbox.
      expectError(yield* o.api("POST", "/v1/sandboxes", { name: "more" }), 402, "usage_limit_reached")
      expectError(yield* o.api("POST", "/v1/sandboxes", { region: "nowhere" }), 402, "usage_limit_reached")
      yield* waitState(o.api, id, "stopped")
      expectError(yield* o.api("POST", `/v1/sandboxes/${id}/start`), 402, "usage_limit_reached")
      // It no longer costs anything.
      clock.set(t0 + 200_000)
      yield* Effect.all([one!.sample, two!.sample], { concurrency: "unbounded" })
      expect((yield* usage).spend_micros).toBe(spend)

      // Each threshold once, with the spend of the sample that crossed it, signed.
      const crossing = (micros: number) => {
        let k = 1
        while (spendAfter(k * STEP) < micros) k++
        return spendAfter(k * STEP)
      }
      const deliveries = () =>
        rx.received.map((r) => ({
          body: JSON.parse(r.body.toString("utf8")),
          event: r.headers["x-svc-event"],
          signature: r.headers["x-svc-signature"],
          raw: r.body
        }))
      const delivered = yield* eventually(
        Effect.sync(deliveries),
        (ds) =>
          ds.some((d) => d.body.data?.pct === 100) &&
          ds.some((d) => d.body.data?.sandbox_id === id && d.body.data?.state === "stopped"),
        Duration.seconds(30)
      )
      for (const d of delivered) {
        expect(d.event).toBe(d.body.event)
        expect(d.signature).toBe(`sha256=${createHmac("sha256", secret).update(d.raw).digest("hex")}`)
        expect(d.body.org_id).toBe(o.id)
      }
      // In the order they were announced (deliveries may overtake one another).
      const usageEvents = (ds: typeof delivered) =>
        ds.filter((d) => d.body.event.startsWith("org."))
          .map((d) => ({ event: d.body.event as string, data: d.body.data }))
          .sort((a, b) => a.data.spend_micros - b.data.spend_micros || (a.data.pct ?? 0) - (b.data.pct ?? 0))
      expect(usageEvents(delivered)).toEqual([
        { event: "org.usage_alert", data: { spend_micros: crossing(30_000), alert_micros: 30_000 } },
        ...[50, 80, 90, 100].map((pct) => ({
          event: "org.usage_limit_reached",
          data: { pct, spend_micros: crossing(pct * 1_000), limit_micros: 100_000, blocked: pct === 100 }
        }))
      ])
      const states = delivered.filter((d) => d.body.data?.sandbox_id === id).map((d) => d.body.data.state)
      expect(states.slice(-2)).toEqual(["stopping", "stopped"])

      // The next period: not blocked, nothing spent yet; a create is admitted again.
      const now = periodOf(platformNow())
      const shift = now.end + 60_000 - platformNow()
      env.ahead.advance(shift)
      expect((yield* o.later("GET", "/v1/billing/usage")).json).toMatchObject({ spend_micros: 0, blocked: false })
      const admitted = yield* o.later("POST", "/v1/sandboxes", { region: "nowhere" })
      expect(admitted.status, admitted.text).toBe(201)
      env.ahead.advance(-shift)

      // A raised limit unblocks at once and re-arms the thresholds above the spend: 50 % of the new
      // limit is announced again when the spend reaches it, once.
      const raised = yield* o.api("PUT", "/v1/billing/limits", { hard_limit_micros: 300_000 })
      expect(raised.json).toMatchObject({ spend_micros: spend, hard_limit_micros: 300_000, blocked: false })
      expect((yield* o.api("POST", `/v1/sandboxes/${id}/start`)).status).toBe(202)
      const t1 = Date.parse((yield* waitState(o.api, id, "running")).startedAt)
      // Its new run is charged from its new start (the meters' clock may go back: nothing before a
      // run's watermark is charged again).
      for (const ms of [20_000, 40_000, 40_000, 40_001]) {
        clock.set(t1 + ms)
        yield* Effect.all([one!.sample, two!.sample], { concurrency: "unbounded" })
      }
      const again = yield* eventually(
        Effect.sync(deliveries),
        (ds) => usageEvents(ds).length === 6,
        Duration.seconds(30)
      )
      expect(usageEvents(again)[5]).toEqual({
        event: "org.usage_limit_reached",
        data: { pct: 50, spend_micros: spendAfter(steps * STEP + 40_000), limit_micros: 300_000, blocked: false }
      })
      expect((yield* usage).spend_micros).toBe(spendAfter(steps * STEP + 40_001))
      // Nothing else arrives late.
      yield* Effect.sleep(Duration.seconds(1))
      expect(usageEvents(deliveries()).length).toBe(6)
      yield* o.api("DELETE", `/v1/sandboxes/${id}`)
      yield* o.api("DELETE", `/v1/sandboxes/${admitted.json.id}`)
      yield* waitState(o.api, id, "deleted")
    }).pipe(Effect.scoped))

  it.effect("svc usage and svc usage limits", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const o = yield* org("billing-cli")
      const shown = yield* svc(env.base, o.token, ["usage"])
      expect(shown.code, shown.stderr).toBe(0)
      expect(shown.stdout).toContain("spend       0.000000 (0 micros)")
      expect(shown.stdout).toContain("hard limit  none")
      expect(shown.stdout).toContain("blocked     no")
      const set = yield* svc(env.base, o.token, ["usage", "limits", "--hard", "12345678", "--alert", "1000000"])
      expect(set.code, set.stderr).toBe(0)
      expect(set.stdout).toContain("hard limit  12.345678 (12345678 micros)")
      expect(set.stdout).toContain("alert       1.000000 (1000000 micros)")
      const removed = yield* svc(env.base, o.token, ["usage", "limits", "--alert", "none", "--json"])
      expect(JSON.parse(removed.stdout)).toMatchObject({ hard_limit_micros: 12_345_678, alert_micros: null })
      const bad = yield* svc(env.base, o.token, ["usage", "limits", "--hard", "-5"])
      expect(bad.code).toBe(1)
      expect(bad.stderr).toContain("--hard")
      // A scoped key: the API's refusal, as the CLI prints it.
      const scoped = yield* (yield* Identity).key(o.id, ["sandboxes:read"])
      const refused = yield* svc(env.base, scoped, ["usage"])
      expect(refused.code).toBe(1)
      expect(refused.stderr).toContain("full_access_required")
      expect((yield* o.api("GET", "/v1/billing/usage")).json).toMatchObject({ hard_limit_micros: 12_345_678 })
    }))
})
