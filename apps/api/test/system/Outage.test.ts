/**
 * A dependency down under a request, over real HTTP: with Postgres stopped, the sandbox, webhook
 * and auth routes (and a credential that must be looked up) answer 503 `unavailable` in the
 * contract's shape, with nothing of the failure in the body, and answer as usual once it is
 * back; with NATS gone, the route that reads the bus does the same. One place answers them all
 * (`Http/Infrastructure.ts`).
 */
import { describe, expect, it } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Database from "@svc/db/Database"
import { startPostgres } from "@svc/local-servers/Servers"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { type Answer, call, serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { ConfigProvider, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import * as Server from "../../src/Server.ts"

const settings = ConfigProvider.layerAdd(
  ConfigProvider.fromUnknown({
    SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8",
    SVC_RATE_LIMIT_PER_SECOND: "100000",
    SVC_RATE_LIMIT_BURST: "100000"
  }),
  { asPrimary: true }
)

const api = HttpRouter.serve(Server.Routes, { disableListenLog: true, disableLogger: true }).pipe(
  Layer.provide(Layer.mergeAll(SecretBox.layer, settings))
)

/** 503 `unavailable` naming the dependency (`database`, `bus`): the Infrastructure middleware's answer. */
const expectUnavailable = (answer: Answer, what: string, dependency: "database" | "bus" = "database") => {
  expect({ what, status: answer.status }).toEqual({ what, status: 503 })
  expect(answer.json).toEqual({ error: expect.stringContaining(dependency), code: "unavailable" })
  // The failure is logged, never sent.
  expect(answer.text).not.toMatch(/sql|postgres|ECONNREFUSED|connect|nats|operation/i)
}

/**
 * Signs up (a session) and mints two `*` keys with it: one used once (this process has it
 * cached from then on), one never used.
 */
const account = (base: string, email: string) =>
  Effect.gen(function*() {
    const up = yield* call(base, "POST", "/v1/auth/sign-up", {
      body: { email, password: "a long enough password", org_name: email }
    })
    expect(up.status).toBe(201)
    const cookie = up.headers.get("set-cookie")!.split(";")[0]!
    const mint = (name: string) =>
      Effect.map(
        call(base, "POST", "/v1/auth/api-keys", { body: { name }, headers: { cookie, origin: base } }),
        (a) => {
          expect(a.status).toBe(201)
          return a.body.token as string
        }
      )
    const key = yield* mint("used")
    const unused = yield* mint("unused")
    expect((yield* call(base, "GET", "/v1/auth/me", { token: key })).status).toBe(200)
    return { key, unused, cookie }
  })

describe("a dependency down under a request", () => {
  it.live(
    "Postgres stopped: sandbox, webhook and auth routes are 503 unavailable, then answer again",
    () =>
      Effect.gen(function*() {
        const pg = yield* Effect.acquireRelease(Effect.promise(() => startPostgres()), (pg) => Effect.promise(pg.close))
        const base = yield* serve(
          api.pipe(Layer.provide(Layer.mergeAll(Database.layerFromUrl(pg.url), TestNats.layer)))
        )
        const { cookie, key, unused } = yield* account(base, "outage@example.com")

        type Request = readonly [string, string, string, { readonly body?: unknown; readonly token?: string }]
        const requests: ReadonlyArray<Request> = [
          ["sandboxes: list", "GET", "/v1/sandboxes", { token: key }],
          ["sandboxes: create", "POST", "/v1/sandboxes", { token: key, body: { region: "nowhere" } }],
          ["sandboxes: get", "GET", "/v1/sandboxes/sbx_00000000000000000000000000", { token: key }],
          ["webhooks: list", "GET", "/v1/webhooks", { token: key }],
          ["webhooks: create", "POST", "/v1/webhooks", { token: key, body: { url: "http://127.0.0.1:9/hook" } }],
          ["auth: keys", "GET", "/v1/auth/api-keys", { token: key }],
          ["auth: sign-in", "POST", "/v1/auth/sign-in", {
            body: { email: "outage@example.com", password: "a long enough password" }
          }],
          ["org", "GET", "/v1/org", { token: key }],
          ["audit", "GET", "/v1/audit", { token: key }]
        ]
        for (const [what, method, path, options] of requests) {
          expect({ what, status: (yield* call(base, method, path, options)).status }).not.toEqual({ what, status: 503 })
        }

        yield* Effect.promise(pg.stop)
        for (const [what, method, path, options] of requests) {
          expectUnavailable(yield* call(base, method, path, options), what)
        }
        // Never verified by this process: its credential is looked up, and cannot be.
        expectUnavailable(yield* call(base, "GET", "/v1/auth/me", { token: unused }), "a key not seen yet")
        // A session is checked against Postgres on every request.
        expectUnavailable(yield* call(base, "GET", "/v1/auth/me", { headers: { cookie } }), "a session")

        yield* Effect.promise(pg.start)
        // The pool reconnects by itself.
        let again = yield* call(base, "GET", "/v1/webhooks", { token: key })
        for (let i = 0; i < 100 && again.status === 503; i++) {
          yield* Effect.sleep("100 millis")
          again = yield* call(base, "GET", "/v1/webhooks", { token: key })
        }
        expect(again.status).toBe(200)
        expect((yield* call(base, "GET", "/v1/sandboxes", { token: key })).status).toBe(200)
        expect((yield* call(base, "GET", "/v1/auth/me", { token: unused })).status).toBe(200)
      }).pipe(Effect.scoped),
    60_000
  )

  it.live("NATS gone: the route that reads the bus is 503 unavailable", () =>
    Effect.gen(function*() {
      const nats = yield* Nats
      const base = yield* serve(api.pipe(Layer.provide(Layer.mergeAll(TestDatabase.layer, Layer.succeed(Nats, nats)))))
      const { key } = yield* account(base, "bus-outage@example.com")
      expect((yield* call(base, "GET", "/v1/workers", { token: key })).status).toBe(200)
      yield* Effect.promise(() => nats.connection.close())
      expectUnavailable(yield* call(base, "GET", "/v1/workers", { token: key }), "workers", "bus")
    }).pipe(Effect.scoped, Effect.provide(TestNats.layer)))
})
