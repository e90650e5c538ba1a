/**
 * The webhook routes over real HTTP with real credentials (docs/contract.md#webhooks): two API
 * servers on one Postgres and NATS, one allowing 127.0.0.0/8 as webhook targets
 * (SVC_WEBHOOK_ALLOWED_SUBNETS) and one not; the outbox relay and a dispatcher run beside them so
 * the test operation really delivers to a receiver on 127.0.0.1.
 */
import { expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import { OutboxRelay } from "@svc/events/Relay"
import { eventually } from "@svc/testing/Eventually"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { receiver } from "@svc/testing/WebhookReceiver"
import { WebhookSender } from "@svc/webhooks/Delivery/Attempt"
import { WebhookDispatcher } from "@svc/webhooks/Delivery/WebhookDispatcher"
import { WebhookAddressGuard } from "@svc/webhooks/Subscriptions/AddressGuard"
import { ConfigProvider, Context, Duration, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import * as crypto from "node:crypto"
import * as Server from "../../src/Server.ts"

interface Answer {
  readonly status: number
  readonly body: any
}

const call = (
  base: string,
  method: string,
  path: string,
  options: { readonly token?: string; readonly body?: unknown; readonly headers?: Record<string, string> } = {}
) =>
  Effect.promise(async (): Promise<Answer> => {
    const headers: Record<string, string> = { ...options.headers }
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
    if (options.body !== undefined) headers["content-type"] = "application/json"
    const res = await fetch(`${base}${path}`, {
      method,
      headers,
      ...(options.body !== undefined
        ? { body: typeof options.body === "string" ? options.body : JSON.stringify(options.body) }
        : {})
    })
    const text = await res.text()
    return { status: res.status, body: text ? JSON.parse(text) : null }
  })

const ENV = {
  // The second attempt far away: a failed delivery stays failed while the test retries it.
  SVC_WEBHOOK_RETRY_SCHEDULE: "60s,300ms,300ms,300ms,300ms",
  SVC_WEBHOOK_ATTEMPT_TIMEOUT: "1s",
  SVC_WEBHOOK_ACK_WAIT: "3s",
  SVC_RATE_LIMIT_PER_SECOND: "100000",
  SVC_RATE_LIMIT_BURST: "100000"
}
const settings = (overrides: Record<string, string>) =>
  ConfigProvider.layerAdd(ConfigProvider.fromUnknown(overrides), { asPrimary: true })

class Env extends Context.Service<Env, {
  /** The API allowing loopback targets, and one that does not. */
  readonly api: string
  readonly strict: string
  /** `*` keys of org A and org B; a `sandboxes:read` key of org A; a session cookie of org A. */
  readonly star: string
  readonly otherOrg: string
  readonly scoped: string
  readonly cookie: string
}>()("test/Webhooks/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const platform = yield* Layer.build(Layer.mergeAll(TestDatabase.layer, TestNats.layer, SecretBox.layer))
    const allowLoopback = settings({ ...ENV, SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8" })
    // What delivers the pings: the outbox relay and a dispatcher.
    yield* Layer.build(
      Layer.mergeAll(
        OutboxRelay.layerWith({ pollInterval: Duration.millis(200) }),
        WebhookDispatcher.layer.pipe(Layer.provide(WebhookSender.layer), Layer.provide(WebhookAddressGuard.layer))
      ).pipe(Layer.provide(allowLoopback), Layer.provide(Layer.succeedContext(platform)))
    )
    const api = (config: Layer.Layer<never>) =>
      HttpRouter.serve(Server.Routes, { disableListenLog: true, disableLogger: true }).pipe(
        Layer.provide(config),
        Layer.provide(Layer.succeedContext(platform))
      )
    const base = yield* serve(api(allowLoopback))
    const strict = yield* serve(api(settings(ENV)))

    const session = (email: string) =>
      Effect.promise(async () => {
        const res = await fetch(`${base}/v1/auth/sign-up`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ email, password: "a long enough password", org_name: email })
        })
        expect(res.status).toBe(201)
        return res.headers.get("set-cookie")!.split(";")[0]!
      })
    const mint = (cookie: string, body: Record<string, unknown>) =>
      Effect.map(call(base, "POST", "/v1/auth/api-keys", { body, headers: { cookie, origin: base } }), (a) => {
        expect(a.status).toBe(201)
        return a.body.token as string
      })
    const cookie = yield* session("hooks-a@example.com")
    const cookieB = yield* session("hooks-b@example.com")
    return Env.of({
      api: base,
      strict,
      star: yield* mint(cookie, { name: "root" }),
      otherOrg: yield* mint(cookieB, { name: "root" }),
      scoped: yield* mint(cookie, { name: "reader", scopes: ["sandboxes:read"] }),
      cookie
    })
  })
)

const RECORD_KEYS = ["createdAt", "enabled", "events", "id", "updatedAt", "url"]

layer(EnvLayer, { excludeTestServices: true, timeout: 60_000 })("webhook routes", (it) => {
  it.effect("create returns the record and the secret once; get and list never show it", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const mine = yield* call(env.api, "POST", "/v1/webhooks", {
        token: env.star,
        body: { url: "http://127.0.0.1:9/a", secret: "my-own-secret-0123" }
      })
      expect(mine.status).toBe(201)
      expect(Object.keys(mine.body).sort()).toEqual([...RECORD_KEYS, "secret_returned_once"].sort())
      expect(mine.body).toMatchObject({
        url: "http://127.0.0.1:9/a",
        events: ["*"],
        enabled: true,
        secret_returned_once: "my-own-secret-0123"
      })
      expect(mine.body.id).toMatch(/^wh_[0-9a-z]{26}$/)
      expect(mine.body.createdAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)

      const generated = yield* call(env.api, "POST", "/v1/webhooks", {
        token: env.star,
        body: { url: "http://127.0.0.1:9/b", events: ["sandbox.created", "ping", "sandbox.created"], enabled: false }
      })
      expect(generated.status).toBe(201)
      expect(generated.body.secret_returned_once).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/)
      expect(generated.body).toMatchObject({ events: ["sandbox.created", "ping"], enabled: false })

      const got = yield* call(env.api, "GET", `/v1/webhooks/${mine.body.id}`, { token: env.star })
      expect(got.status).toBe(200)
      expect(Object.keys(got.body).sort()).toEqual(RECORD_KEYS)
      // A session works as well as a `*` key (account-level route).
      const viaCookie = yield* call(env.api, "GET", "/v1/webhooks", { headers: { cookie: env.cookie } })
      expect(viaCookie.status).toBe(200)
      expect(viaCookie.body).toMatchObject({ total: 2, offset: 0, limit: 50, has_more: false })
      expect(viaCookie.body.webhooks.map((w: any) => w.id)).toEqual([generated.body.id, mine.body.id])
      expect(JSON.stringify(viaCookie.body)).not.toContain("secret")
      const page = yield* call(env.api, "GET", "/v1/webhooks?limit=1&offset=1", { token: env.star })
      expect(page.body).toMatchObject({ total: 2, offset: 1, limit: 1, has_more: false })
      for (const id of [mine.body.id, generated.body.id]) {
        expect((yield* call(env.api, "DELETE", `/v1/webhooks/${id}`, { token: env.star })).status).toBe(204)
      }
    }))

  it.effect("Idempotency-Key: the same key and body answer the first response (200); another body is 422", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const create = (key: string, body: unknown) =>
        call(env.api, "POST", "/v1/webhooks", { token: env.star, body, headers: { "idempotency-key": key } })
      const body = { url: "http://127.0.0.1:9/idem", events: ["sandbox.created"] }
      const first = yield* create("key-abcdefgh-1", body)
      expect(first.status).toBe(201)
      const again = yield* create("key-abcdefgh-1", { events: ["sandbox.created"], url: "http://127.0.0.1:9/idem" })
      expect(again.status).toBe(200)
      expect(again.body).toEqual(first.body)
      const other = yield* create("key-abcdefgh-1", { ...body, enabled: false })
      expect([other.status, other.body.code]).toEqual([422, "idempotency_key_reused"])
      // Another org's same key is its own.
      const elsewhere = yield* call(env.api, "POST", "/v1/webhooks", {
        token: env.otherOrg,
        body,
        headers: { "idempotency-key": "key-abcdefgh-1" }
      })
      expect(elsewhere.status).toBe(201)
      expect(elsewhere.body.id).not.toBe(first.body.id)
      expect((yield* create("short", body)).status).toBe(400)
      const list = yield* call(env.api, "GET", "/v1/webhooks", { token: env.star })
      expect(list.body.webhooks.filter((w: any) => w.url === "http://127.0.0.1:9/idem")).toHaveLength(1)
      for (const [token, id] of [[env.star, first.body.id], [env.otherOrg, elsewhere.body.id]]) {
        expect((yield* call(env.api, "DELETE", `/v1/webhooks/${id}`, { token })).status).toBe(204)
      }
    }))

  it.effect("refuses non-public URLs, patterns and unknown events, short secrets, bad bodies", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const create = (base: string, body: unknown) => call(base, "POST", "/v1/webhooks", { token: env.star, body })
      for (
        const url of [
          "ftp://example.com/x",
          "not a url",
          "http://10.0.0.1/",
          "http://169.254.169.254/latest/meta-data",
          "http://[::1]/",
          "http://localhost/",
          "http://0x7f000001.example.invalid/",
          "http://192.168.1.1/",
          "http://[::ffff:127.0.0.1]/",
          "http://user:pass@127.0.0.1/",
          "http://127.0.0.1/#frag",
          ""
        ]
      ) {
        const res = yield* create(env.api, { url })
        expect([url, res.status, res.body.code]).toEqual([url, 400, "invalid_webhook_url"])
      }
      // Without the operator's allow-list, loopback in any spelling is refused too.
      for (const url of ["http://127.0.0.1:8080/", "http://2130706433/", "http://0177.0.0.1/", "http://127.1/"]) {
        const res = yield* create(env.strict, { url })
        expect([url, res.status, res.body.code]).toEqual([url, 400, "invalid_webhook_url"])
      }
      for (const events of [["sandbox.*"], ["*.created"], ["sandbox.nope"], [""], [], ["sandbox.created", "bogus"]]) {
        const res = yield* create(env.api, { url: "http://127.0.0.1:9/", events })
        expect([events, res.status, res.body.code]).toEqual([events, 400, "invalid_event_filter"])
      }
      for (
        const body of [{ url: "http://127.0.0.1:9/", secret: "short" }, {}, { url: 42 }, {
          url: "http://127.0.0.1:9/",
          enabled: "yes"
        }, { url: "http://127.0.0.1:9/", events: "*" }]
      ) {
        const res = yield* create(env.api, body)
        expect([body, res.status, res.body.code]).toEqual([body, 400, "invalid_request"])
      }
      expect((yield* call(env.api, "GET", "/v1/webhooks", { token: env.star })).body.total).toBe(0)
    }))

  it.effect("the 21st webhook of an org is 400 webhook_limit_reached, even when created concurrently", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const results = yield* Effect.all(
        Array.from(
          { length: 25 },
          (_, i) => call(env.api, "POST", "/v1/webhooks", { token: env.star, body: { url: `http://127.0.0.1:9/${i}` } })
        ),
        { concurrency: "unbounded" }
      )
      expect(results.filter((r) => r.status === 201)).toHaveLength(20)
      const refused = results.filter((r) => r.status !== 201)
      expect(refused.map((r) => [r.status, r.body.code])).toEqual(
        Array.from({ length: 5 }, () => [400, "webhook_limit_reached"])
      )
      // Another org is not affected; a deletion makes room.
      expect(
        (yield* call(env.api, "POST", "/v1/webhooks", { token: env.otherOrg, body: { url: "http://127.0.0.1:9/" } }))
          .status
      ).toBe(201)
      const list = yield* call(env.api, "GET", "/v1/webhooks?limit=500", { token: env.star })
      expect(list.body.total).toBe(20)
      expect((yield* call(env.api, "DELETE", `/v1/webhooks/${list.body.webhooks[0].id}`, { token: env.star })).status)
        .toBe(204)
      expect(
        (yield* call(env.api, "POST", "/v1/webhooks", { token: env.star, body: { url: "http://127.0.0.1:9/again" } }))
          .status
      ).toBe(201)
      expect(
        (yield* call(env.api, "POST", "/v1/webhooks", { token: env.star, body: { url: "http://127.0.0.1:9/over" } }))
          .body.code
      ).toBe("webhook_limit_reached")
      for (const w of (yield* call(env.api, "GET", "/v1/webhooks?limit=500", { token: env.star })).body.webhooks) {
        expect((yield* call(env.api, "DELETE", `/v1/webhooks/${w.id}`, { token: env.star })).status).toBe(204)
      }
    }))

  it.effect("update, delete; another org's webhook is 404 everywhere; scoped keys and no credential are refused", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const created = yield* call(env.api, "POST", "/v1/webhooks", {
        token: env.star,
        body: { url: "http://127.0.0.1:9/u" }
      })
      const id = created.body.id
      const patched = yield* call(env.api, "PATCH", `/v1/webhooks/${id}`, {
        token: env.star,
        body: { enabled: false, events: ["org.usage_alert"] }
      })
      expect(patched.status).toBe(200)
      expect(patched.body).toMatchObject({
        id,
        enabled: false,
        events: ["org.usage_alert"],
        url: "http://127.0.0.1:9/u"
      })
      expect(Date.parse(patched.body.updatedAt)).toBeGreaterThanOrEqual(Date.parse(created.body.updatedAt))
      for (
        const [body, code] of [[{ url: "http://10.1.2.3/" }, "invalid_webhook_url"], [
          { events: ["sandbox.*"] },
          "invalid_event_filter"
        ], [{ enabled: 1 }, "invalid_request"]] as const
      ) {
        const res = yield* call(env.api, "PATCH", `/v1/webhooks/${id}`, { token: env.star, body })
        expect([res.status, res.body.code]).toEqual([400, code])
      }
      expect((yield* call(env.api, "GET", `/v1/webhooks/${id}`, { token: env.star })).body).toMatchObject({
        enabled: false,
        url: "http://127.0.0.1:9/u"
      })

      const other = env.otherOrg
      const delivery = "whd_01kab3n4sgz0d5qpxg3m9kaxyz"
      for (
        const [method, path, body] of [
          ["GET", `/v1/webhooks/${id}`, undefined],
          ["PATCH", `/v1/webhooks/${id}`, { enabled: true }],
          ["DELETE", `/v1/webhooks/${id}`, undefined],
          ["POST", `/v1/webhooks/${id}/test`, undefined],
          ["GET", `/v1/webhooks/${id}/deliveries`, undefined],
          ["POST", `/v1/webhooks/${id}/deliveries/${delivery}/retry`, undefined]
        ] as const
      ) {
        const res = yield* call(env.api, method, path, { token: other, ...(body ? { body } : {}) })
        expect([method, path, res.status, res.body?.code]).toEqual([method, path, 404, "not_found"])
        const scoped = yield* call(env.api, method, path, { token: env.scoped, ...(body ? { body } : {}) })
        expect([method, path, scoped.status, scoped.body?.code]).toEqual([method, path, 403, "full_access_required"])
        const anonymous = yield* call(env.api, method, path, body ? { body } : {})
        expect([method, path, anonymous.status]).toEqual([method, path, 401])
      }
      expect((yield* call(env.api, "GET", "/v1/webhooks/not-an-id", { token: env.star })).status).toBe(400)
      expect((yield* call(env.api, "DELETE", `/v1/webhooks/${id}`, { token: env.star })).status).toBe(204)
      expect((yield* call(env.api, "GET", `/v1/webhooks/${id}`, { token: env.star })).status).toBe(404)
      expect((yield* call(env.api, "DELETE", `/v1/webhooks/${id}`, { token: env.star })).status).toBe(404)
    }))

  it.effect("test sends a signed ping through the real path; deliveries list it; retry answers by state", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const rx = yield* receiver(() => ({ status: 500 }))
      const created = yield* call(env.api, "POST", "/v1/webhooks", {
        token: env.star,
        body: { url: rx.url, events: ["sandbox.deleted"], secret: "ping-secret-0123456789" }
      })
      const id = created.body.id
      const test = yield* call(env.api, "POST", `/v1/webhooks/${id}/test`, { token: env.star })
      expect(test.status).toBe(202)
      expect(Object.keys(test.body)).toEqual(["delivery_id"])
      const deliveryId = test.body.delivery_id
      expect(deliveryId).toMatch(/^whd_[0-9a-z]{26}$/)
      yield* Effect.promise(() => rx.waitFor(1))
      const request = rx.received[0]!
      const expected = "sha256=" +
        crypto.createHmac("sha256", "ping-secret-0123456789").update(request.body).digest("hex")
      expect(request.headers["x-svc-signature"]).toBe(expected)
      expect(request.headers["x-svc-event"]).toBe("ping")
      expect(request.headers["x-svc-delivery-id"]).toBe(deliveryId)
      expect(JSON.parse(request.body.toString())).toMatchObject({ event: "ping", data: { webhook_id: id } })

      // Retrying while the delivery is still pending or failed-and-waiting: refuse pending, allow failed.
      const failed = yield* eventually(
        call(env.api, "GET", `/v1/webhooks/${id}/deliveries?status=failed`, { token: env.star }),
        (a) => a.body.total >= 1
      )
      const row = failed.body.deliveries[0]
      expect(Object.keys(row).sort()).toEqual(
        [
          "attempt",
          "createdAt",
          "delivery_id",
          "duration_ms",
          "error",
          "event",
          "id",
          "next_attempt_at",
          "response_code",
          "status"
        ]
      )
      expect(row).toMatchObject({
        delivery_id: deliveryId,
        event: "ping",
        attempt: 1,
        status: "failed",
        response_code: 500,
        error: "HTTP 500"
      })
      expect(row.id).toMatch(/^wha_/)
      expect(Date.parse(row.next_attempt_at)).toBeGreaterThan(Date.parse(row.createdAt))

      rx.setReply(() => ({ status: 204 }))
      const retried = yield* call(env.api, "POST", `/v1/webhooks/${id}/deliveries/${deliveryId}/retry`, {
        token: env.star
      })
      expect(retried.status).toBe(202)
      expect(retried.body).toEqual({ delivery_id: deliveryId, status: "retried" })
      const succeeded = yield* eventually(
        call(env.api, "GET", `/v1/webhooks/${id}/deliveries?status=succeeded`, { token: env.star }),
        (a) => a.body.total === 1
      )
      expect(succeeded.body.deliveries[0]).toMatchObject({
        delivery_id: deliveryId,
        attempt: 1,
        status: "succeeded",
        response_code: 204,
        error: null
      })
      const again = yield* call(env.api, "POST", `/v1/webhooks/${id}/deliveries/${deliveryId}/retry`, {
        token: env.star
      })
      expect([again.status, again.body.code]).toEqual([409, "delivery_not_retryable"])
      const unknown = yield* call(
        env.api,
        "POST",
        `/v1/webhooks/${id}/deliveries/whd_01kab3n4sgz0d5qpxg3m9kaxyz/retry`,
        { token: env.star }
      )
      expect([unknown.status, unknown.body.code]).toEqual([404, "not_found"])
      for (const query of ["status=bogus", "limit=0", "limit=501", "offset=-1"]) {
        const res = yield* call(env.api, "GET", `/v1/webhooks/${id}/deliveries?${query}`, { token: env.star })
        expect([query, res.status, res.body.code]).toEqual([query, 400, "invalid_request"])
      }
      const all = yield* call(env.api, "GET", `/v1/webhooks/${id}/deliveries?limit=1`, { token: env.star })
      expect(all.body).toMatchObject({ total: 2, limit: 1, offset: 0, has_more: true })
    }).pipe(Effect.scoped))
})
