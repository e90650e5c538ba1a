/**
 * The foundation's promises, over real HTTP against a real Postgres and NATS: health, the error
 * shapes of docs/contract.md#errors for failures outside handlers, request ids, graceful shutdown.
 */
import { describe, expect, it } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Database from "@svc/db/Database"
import { Api } from "@svc/domain/Api"
import { freePort, startPostgres } from "@svc/local-servers/Servers"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { Deferred, Duration, Effect, Exit, Fiber, Layer, Schema, Scope } from "effect"
import { HttpRouter } from "effect/http"
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { ApiMiddleware } from "../../src/Http/Middleware.ts"
import * as Server from "../../src/Server.ts"

const platformLayer = Layer.mergeAll(TestDatabase.layer, TestNats.layer)

const apiLayer = HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
  Layer.provide(SecretBox.layer)
)

describe("API foundation", () => {
  it.live("GET /v1/health is 200 with both dependencies up, and carries x-request-id", () =>
    Effect.gen(function*() {
      const base = yield* serve(apiLayer.pipe(Layer.provide(platformLayer)))
      const res = yield* Effect.promise(() => fetch(`${base}/v1/health`))
      expect(res.status).toBe(200)
      expect(yield* Effect.promise(() => res.json())).toEqual({ status: "ok", postgres: "up", nats: "up" })
      expect(res.headers.get("x-request-id")).toMatch(/^req_/)
      const mine = yield* Effect.promise(() =>
        fetch(`${base}/v1/health`, { headers: { "x-request-id": "client-chosen-id-1" } })
      )
      expect(mine.headers.get("x-request-id")).toBe("client-chosen-id-1")
      const bogus = yield* Effect.promise(() =>
        fetch(`${base}/v1/health`, { headers: { "x-request-id": "bad id\twith tab" } })
      )
      expect(bogus.headers.get("x-request-id")).toMatch(/^req_/)
    }).pipe(Effect.scoped))

  it.live("serves the OpenAPI document and the docs page of the same definition", () =>
    Effect.gen(function*() {
      const base = yield* serve(apiLayer.pipe(Layer.provide(platformLayer)))
      const doc = yield* Effect.promise(() => fetch(`${base}/v1/openapi.json`).then((r) => r.json() as Promise<any>))
      expect(doc.openapi).toMatch(/^3\.1/)
      expect(Object.keys(doc.paths)).toContain("/v1/health")
      // The bearer scheme, declared on every operation (a client's generator asks for the key).
      expect(doc.components.securitySchemes.bearer).toMatchObject({ type: "http", scheme: "Bearer" })
      const operations = Object.values<Record<string, { security?: unknown }>>(doc.paths).flatMap(Object.values)
      expect(operations.length).toBeGreaterThan(50)
      expect(operations.filter((op) => JSON.stringify(op.security) !== JSON.stringify([{ bearer: [] }]))).toEqual([])
      // The document OpenApi.test.ts checks against the OWASP ruleset is the one served.
      expect(doc).toEqual(JSON.parse(JSON.stringify(OpenApi.fromApi(Api))))
      const docs = yield* Effect.promise(() => fetch(`${base}/docs`))
      expect(docs.status).toBe(200)
      expect(docs.headers.get("content-type")).toContain("text/html")
    }).pipe(Effect.scoped))

  it.live("unknown routes are 404 not_found in the contract's error shape", () =>
    Effect.gen(function*() {
      const base = yield* serve(apiLayer.pipe(Layer.provide(platformLayer)))
      for (
        const [method, path] of [["GET", "/v1/nope"], ["POST", "/v1/health"], ["DELETE", "/"], [
          "GET",
          "/v1/health/extra"
        ]] as const
      ) {
        const res = yield* Effect.promise(() => fetch(`${base}${path}`, { method }))
        expect(res.status).toBe(404)
        const body = yield* Effect.promise(() => res.json())
        expect(body).toEqual({ error: expect.any(String), code: "not_found" })
        expect(res.headers.get("x-request-id")).toBeTruthy()
      }
    }).pipe(Effect.scoped))

  describe("bodies", () => {
    // A route of this test's own, behind the same global middleware as every API route.
    class EchoGroup extends HttpApiGroup.make("echo").add(
      HttpApiEndpoint.post("echo", "/v1/echo", {
        payload: Schema.Struct({ name: Schema.String, count: Schema.Int }),
        success: Schema.Struct({ name: Schema.String, count: Schema.Int })
      }),
      HttpApiEndpoint.get("slow", "/v1/slow", { success: Schema.Struct({ done: Schema.Boolean }) }),
      HttpApiEndpoint.get("boom", "/v1/boom", { success: Schema.Struct({}) }),
      HttpApiEndpoint.get("stuck", "/v1/stuck", { success: Schema.Struct({}) })
    ) {}
    class EchoApi extends HttpApi.make("echo").add(EchoGroup).annotate(HttpApi.ParseOptions, { errors: "all" }) {}
    /** Completed by each request to /v1/stuck, which then never answers by itself. */
    let stuckArrived = Deferred.makeUnsafe<void>()
    const echoHandlers = HttpApiBuilder.group(
      EchoApi,
      "echo",
      (h) =>
        h.handle("echo", ({ payload }) => Effect.succeed(payload))
          .handle("slow", () => Effect.as(Effect.sleep(400), { done: true }))
          .handle("boom", () => Effect.die(new Error("secret internal detail")))
          .handle("stuck", () => Effect.andThen(Deferred.succeed(stuckArrived, undefined), Effect.never))
    )
    const echoRoutes = Layer.mergeAll(HttpApiBuilder.layer(EchoApi).pipe(Layer.provide(echoHandlers)), ApiMiddleware)
    const echoLayer = HttpRouter.serve(echoRoutes, { disableLogger: true, disableListenLog: true })

    const post = (base: string, body: string | Uint8Array, contentType = "application/json") =>
      fetch(`${base}/v1/echo`, { method: "POST", body, headers: { "content-type": contentType } })

    it.live("malformed JSON is 400 invalid_request", () =>
      Effect.gen(function*() {
        const base = yield* serve(echoLayer)
        for (const body of ["{", "{\"name\": ", "not json", "{\"name\":\"a\",\"count\":1}}"]) {
          const res = yield* Effect.promise(() => post(base, body))
          expect(res.status).toBe(400)
          const json: any = yield* Effect.promise(() => res.json())
          expect(json.code).toBe("invalid_request")
          expect(typeof json.error).toBe("string")
        }
      }).pipe(Effect.scoped))

    it.live("a body that fails validation is 400 invalid_request naming each issue", () =>
      Effect.gen(function*() {
        const base = yield* serve(echoLayer)
        const res = yield* Effect.promise(() => post(base, JSON.stringify({ name: 1, count: 1.5 })))
        expect(res.status).toBe(400)
        const json: any = yield* Effect.promise(() => res.json())
        expect(json.code).toBe("invalid_request")
        expect(json.issues.map((i: { path: string }) => i.path).sort()).toEqual(["count", "name"])
        const ok = yield* Effect.promise(() =>
          post(base, JSON.stringify({ name: "a", count: 2 })).then((r) => r.json())
        )
        expect(ok).toEqual({ name: "a", count: 2 })
      }).pipe(Effect.scoped))

    it.live("a body over 1 MiB is 413 payload_too_large", () =>
      Effect.gen(function*() {
        const base = yield* serve(echoLayer)
        const big = JSON.stringify({ name: "x".repeat(1024 * 1024 + 10), count: 1 })
        const res = yield* Effect.promise(() => post(base, big))
        expect(res.status).toBe(413)
        expect(yield* Effect.promise(() => res.json())).toEqual({
          error: expect.any(String),
          code: "payload_too_large"
        })
        const justUnder = JSON.stringify({ name: "x".repeat(1024 * 1024 - 100), count: 1 })
        expect((yield* Effect.promise(() => post(base, justUnder))).status).toBe(200)
      }).pipe(Effect.scoped))

    it.live("an unexpected failure is 500 internal without internals", () =>
      Effect.gen(function*() {
        const base = yield* serve(echoLayer)
        const res = yield* Effect.promise(() => fetch(`${base}/v1/boom`))
        expect(res.status).toBe(500)
        const text = yield* Effect.promise(() => res.text())
        expect(JSON.parse(text)).toEqual({ error: "Internal error", code: "internal" })
        expect(text).not.toContain("secret")
        expect(res.headers.get("x-request-id")).toBeTruthy()
      }).pipe(Effect.scoped))

    it.live("a stopping server finishes the requests in flight", () =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const base = yield* Scope.provide(serve(echoLayer), scope)
        const inFlight = fetch(`${base}/v1/slow`).then(async (r) => ({ status: r.status, body: await r.json() }))
        yield* Effect.sleep(100)
        yield* Scope.close(scope, Exit.void)
        const result = yield* Effect.promise(() => inFlight)
        expect(result).toEqual({ status: 200, body: { done: true } })
        const after = yield* Effect.promise(() => fetch(`${base}/v1/slow`).then(() => "answered", () => "refused"))
        expect(after).toBe("refused")
      }))
    it.live("a request still running when a stop's grace ends is answered 503 unavailable, and its connection closes", () =>
      Effect.gen(function*() {
        stuckArrived = Deferred.makeUnsafe<void>()
        const port = yield* Effect.promise(() => freePort())
        const scope = yield* Scope.make()
        yield* Scope.provide(
          Layer.build(
            Server.serveInOrder(echoRoutes, { port, host: "127.0.0.1", gracefulShutdown: Duration.millis(300) })
          ),
          scope
        )
        const inFlight = fetch(`http://127.0.0.1:${port}/v1/stuck`).then(async (r) => ({
          status: r.status,
          connection: r.headers.get("connection"),
          requestId: r.headers.get("x-request-id"),
          body: await r.json()
        }))
        yield* Deferred.await(stuckArrived)
        const stopped = yield* Effect.forkChild(Scope.close(scope, Exit.void))
        const result = yield* Effect.promise(() => inFlight)
        expect(result).toEqual({
          status: 503,
          connection: "close",
          requestId: expect.stringMatching(/^req_/),
          body: { error: expect.any(String), code: "unavailable" }
        })
        // The stop ends (its handler interrupted with the server's own limit), and the port is closed.
        yield* Fiber.join(stopped)
        const after = yield* Effect.promise(() =>
          fetch(`http://127.0.0.1:${port}/v1/stuck`).then(() => "answered", () => "refused")
        )
        expect(after).toBe("refused")
      }))
  })

  /** Health is probed in the background: ask until it reports `status` (bounded). */
  const healthUntil = (base: string, status: number) =>
    Effect.promise(async () => {
      let last = { status: 0, body: undefined as unknown }
      for (let i = 0; i < 100; i++) {
        const res = await fetch(`${base}/v1/health`)
        last = { status: res.status, body: await res.json() }
        if (last.status === status) break
        await new Promise((r) => setTimeout(r, 100))
      }
      return last
    })

  it.live("health is 503 unavailable while Postgres is stopped and 200 again once it is back", () =>
    Effect.gen(function*() {
      const pg = yield* Effect.acquireRelease(Effect.promise(() => startPostgres()), (pg) => Effect.promise(pg.close))
      const layer = apiLayer.pipe(Layer.provide(Layer.mergeAll(Database.layerFromUrl(pg.url), TestNats.layer)))
      const base = yield* serve(layer)
      expect((yield* healthUntil(base, 200)).status).toBe(200)
      yield* Effect.promise(pg.stop)
      expect(yield* healthUntil(base, 503)).toEqual({
        status: 503,
        body: { error: expect.stringContaining("postgres"), code: "unavailable" }
      })
      yield* Effect.promise(pg.start)
      // The pool reconnects by itself.
      expect(yield* healthUntil(base, 200)).toEqual({ status: 200, body: { status: "ok", postgres: "up", nats: "up" } })
    }).pipe(Effect.scoped))

  it.live("health is 503 naming nats when the bus does not answer", () =>
    Effect.gen(function*() {
      const nats = yield* Nats
      const base = yield* serve(
        apiLayer.pipe(Layer.provide(Layer.mergeAll(TestDatabase.layer, Layer.succeed(Nats, nats))))
      )
      yield* Effect.promise(() => nats.connection.close())
      expect(yield* healthUntil(base, 503)).toEqual({
        status: 503,
        body: { error: expect.stringContaining("nats"), code: "unavailable" }
      })
    }).pipe(Effect.scoped, Effect.provide(TestNats.layer)))
})
