/**
 * Every bad input is a 4xx with the contract's `{error, code}` body, never a 5xx or a hang
 * (issue 9, item 9), over real HTTP against the real API on its own Node server: JSON nested
 * 5,000 levels deep, NUL characters in every kind of text field, `?token=` on paths that are not
 * routes of the API, a content type a route does not take, and requests Node itself cannot parse.
 */
import { expect, layer } from "@effect/vitest"
import { makeId } from "@svc/domain/Ids"
import { MAX_JSON_DEPTH } from "@svc/domain/Text"
import { type Answer, call } from "@svc/testing/TestHttp"
import { Context, Effect, Layer } from "effect"
import * as Net from "node:net"
import { buildPlatform, serveOwnApi, signUpWithKey } from "../support/OwnServer.ts"

class Env extends Context.Service<Env, {
  readonly base: string
  readonly port: number
  /** A `*` key and a session cookie of one org. */
  readonly token: string
  readonly cookie: string
}>()("test/BadInput/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const platform = yield* buildPlatform
    // Many sign-ups and refusals from 127.0.0.1: the per-address limits are Abuse.test.ts's.
    const base = yield* serveOwnApi(platform, {
      SVC_SIGN_IN_RATE_PER_MINUTE: "100000",
      SVC_SIGN_IN_RATE_BURST: "100000",
      SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8"
    })
    const { cookie, token } = yield* signUpWithKey(base, "inputs@example.com", "Inputs")
    return Env.of({ base, port: Number(new URL(base).port), token, cookie })
  })
)

/** A refusal of the contract: the status, `{error, code, ...}` as JSON, an x-request-id. */
const expectRefusal = (res: Answer, status: number, code: string) => {
  expect({ status: res.status, code: res.json?.code }, res.text).toEqual({ status, code })
  expect(typeof res.json.error).toBe("string")
  expect(res.headers.get("content-type")).toMatch(/^application\/json/)
  expect(res.headers.get("x-request-id")).toBeTruthy()
}

/** `{"a":{"a":...1...}}` as text (5,000 levels overflow `JSON.stringify` in the test itself). */
const nestedText = (depth: number) => `${"{\"a\":".repeat(depth)}1${"}".repeat(depth)}`
const nested = (depth: number): unknown => JSON.parse(nestedText(depth))
/** A JSON body with `deep` spliced in where `"DEEP"` is. */
const withDeep = (body: unknown, deep: string) => JSON.stringify(body).replace("\"DEEP\"", deep)

/** One request on a raw socket (what Node's own parser answers); the whole answer as text. */
const raw = (port: number, request: string) =>
  Effect.promise(() =>
    new Promise<string>((resolve, reject) => {
      const socket = Net.connect(port, "127.0.0.1")
      let answer = ""
      socket.on("data", (chunk) => (answer += chunk.toString("utf8")))
      socket.on("end", () => resolve(answer))
      socket.on("error", reject)
      socket.write(request)
    })
  )

const parseRaw = (answer: string) => {
  const [head, body] = answer.split("\r\n\r\n")
  const [statusLine, ...headers] = head!.split("\r\n")
  return {
    status: Number(statusLine!.split(" ")[1]),
    headers: Object.fromEntries(
      headers.map((h) => [h.slice(0, h.indexOf(":")).toLowerCase(), h.slice(h.indexOf(":") + 1).trim()])
    ),
    body: JSON.parse(body!)
  }
}

layer(EnvLayer, { excludeTestServices: true })("bad input", (it) => {
  it.effect("JSON nested deeper than the limit is 400 invalid_request on every kind of route, before decoding", () =>
    Effect.gen(function*() {
      const { base, token, cookie } = yield* Env
      const deep = nestedText(5_000)
      const bodies: Array<[string, string, string, Record<string, string>]> = [
        ["POST", "/v1/sandboxes", withDeep({ region: "nowhere", metadata: { deep: "DEEP" } }, deep), {}],
        ["POST", "/v1/sandboxes", withDeep({ region: "nowhere", metadata: "DEEP" }, nestedText(MAX_JSON_DEPTH)), {}],
        ["POST", "/v1/auth/api-keys", withDeep({ name: "k", scopes: "DEEP" }, deep), {}],
        ["PATCH", "/v1/org", withDeep({ name: "DEEP" }, deep), {}],
        ["POST", "/v1/webhooks", withDeep({ url: "http://127.0.0.1:9/x", events: "DEEP" }, deep), {}],
        [
          "POST",
          "/v1/auth/sign-up",
          withDeep({ email: "deep@example.com", password: "a long password", org_name: "DEEP" }, deep),
          { auth: "none" }
        ],
        ["POST", "/v1/auth/sign-in", deep, { auth: "none" }],
        ["POST", `/v1/sandboxes/${makeId("sandbox")}/exec`, withDeep({ cmd: ["true"], env: "DEEP" }, deep), {}]
      ]
      for (const [method, path, body, options] of bodies) {
        const res = yield* call(base, method, path, { body, ...(options.auth === "none" ? {} : { token }) })
        expectRefusal(res, 400, "invalid_request")
        expect(res.json.error).toContain(`${MAX_JSON_DEPTH} levels`)
      }
      // Arrays count too, and a cookie-authenticated request is checked the same way.
      const arrays = "[".repeat(5_000) + "]".repeat(5_000)
      expectRefusal(
        yield* call(base, "POST", "/v1/auth/api-keys", { body: arrays, headers: { cookie, origin: base } }),
        400,
        "invalid_request"
      )
      // Brackets inside strings are text, not nesting.
      const brackets = yield* call(base, "POST", "/v1/sandboxes", {
        token,
        body: { region: "nowhere", metadata: { text: "{[".repeat(1_000) } }
      })
      expect(brackets.status, brackets.text).toBe(201)
      // Within the limit: metadata itself may nest 30 levels (the body adds two).
      const fine = yield* call(base, "POST", "/v1/sandboxes", {
        token,
        body: { region: "nowhere", metadata: nested(30) }
      })
      expect(fine.status, fine.text).toBe(201)
      // A route that takes raw bytes is not parsed: a deep JSON file is just bytes (404: no such sandbox).
      const upload = yield* call(base, "PUT", `/v1/sandboxes/${makeId("sandbox")}/files?path=/x.json`, {
        token,
        raw: deep,
        headers: { "content-type": "application/json" }
      })
      expectRefusal(upload, 404, "not_found")
    }))

  it.effect("a NUL in any text field is 400 invalid_request, never a 5xx", () =>
    Effect.gen(function*() {
      const { base, token, cookie } = yield* Env
      const nul = "a\u0000b"
      const cases: Array<[string, string, unknown, "key" | "none" | "cookie"]> = [
        [
          "POST",
          "/v1/auth/sign-up",
          { email: `x${nul}@example.com`, password: "a long password", org_name: "x" },
          "none"
        ],
        ["POST", "/v1/auth/sign-up", { email: "nul1@example.com", password: `long pass${nul}`, org_name: "x" }, "none"],
        ["POST", "/v1/auth/sign-up", { email: "nul2@example.com", password: "a long password", org_name: nul }, "none"],
        ["POST", "/v1/auth/sign-in", { email: `inputs@example.com${nul}`, password: "a long password" }, "none"],
        ["POST", "/v1/auth/sign-in", { email: "inputs@example.com", password: nul }, "none"],
        ["POST", "/v1/auth/api-keys", { name: nul }, "key"],
        ["POST", "/v1/auth/api-keys", { name: "k", scopes: [nul] }, "cookie"],
        ["PATCH", "/v1/org", { name: nul }, "key"],
        ["POST", "/v1/sandboxes", { name: nul }, "key"],
        ["POST", "/v1/sandboxes", { region: "nowhere", metadata: { note: nul } }, "key"],
        ["POST", "/v1/sandboxes", { region: "nowhere", metadata: { [nul]: 1 } }, "key"],
        ["POST", "/v1/sandboxes", { region: "nowhere", metadata: { list: [{ deep: [nul] }] } }, "key"],
        ["POST", "/v1/sandboxes", { template: nul }, "key"],
        ["POST", "/v1/sandboxes", { region: nul }, "key"],
        ["POST", "/v1/sandboxes", { env: { A: nul } }, "key"],
        ["POST", "/v1/webhooks", { url: `http://127.0.0.1:9/${nul}` }, "key"],
        ["POST", "/v1/webhooks", { url: "http://127.0.0.1:9/x", events: [nul] }, "key"],
        ["POST", "/v1/webhooks", { url: "http://127.0.0.1:9/x", secret: `0123456789abcdef${nul}` }, "key"]
      ]
      const answers: Array<string> = []
      for (const [method, path, body, auth] of cases) {
        const res = yield* call(base, method, path, {
          body,
          ...(auth === "key" ? { token } : auth === "cookie" ? { headers: { cookie, origin: base } } : {})
        })
        answers.push(`${method} ${path} ${JSON.stringify(body)}: ${res.status} ${res.json?.code}`)
        expect(res.status, answers.at(-1)).toBeLessThan(500)
        expect(res.status, answers.at(-1)).toBeGreaterThanOrEqual(400)
        expect(typeof res.json.error).toBe("string")
      }
      // Each is a validation refusal of the request (the webhook URL one is the URL guard's).
      expect(
        answers.filter((a) => !/ 400 (invalid_request|invalid_scope|invalid_webhook_url|invalid_event_filter)$/.test(a))
      )
        .toEqual([])
      // In a query string too.
      expectRefusal(yield* call(base, "GET", "/v1/audit?action=%00", { token }), 400, "invalid_request")
      expectRefusal(yield* call(base, "GET", "/v1/sandboxes?state=running%00", { token }), 400, "invalid_request")
    }))

  it.effect("?token= is 401 token_in_query_not_allowed everywhere but /terminal: docs, the OpenAPI document, unknown paths", () =>
    Effect.gen(function*() {
      const { base, token } = yield* Env
      for (
        const [method, path] of [
          ["GET", "/v1/openapi.json"],
          ["GET", "/docs"],
          ["GET", "/v1/health"],
          ["GET", "/v1/no-such-route"],
          ["POST", "/v1/no-such-route"],
          ["GET", "/"],
          ["DELETE", "/anything/at/all"],
          ["GET", "/v1/sandboxes"]
        ] as const
      ) {
        for (const query of [`token=${token}`, "token=", "token", "a=1&token=x", "%74oken=x"]) {
          const res = yield* call(base, method, `${path}?${query}`)
          expectRefusal(res, 401, "token_in_query_not_allowed")
          expect(res.headers.get("www-authenticate")).toBe("Bearer")
          expect(res.text).not.toContain(token)
        }
      }
      // Without it they answer as usual.
      expect((yield* call(base, "GET", "/v1/openapi.json")).status).toBe(200)
      expect((yield* call(base, "GET", "/docs")).status).toBe(200)
      // /terminal is where ?token= belongs: it is not refused for carrying one (no such route yet: 404).
      const terminal = yield* call(base, "GET", `/terminal?token=${token}&sandbox_id=sbx_x`)
      expect(terminal.json?.code).not.toBe("token_in_query_not_allowed")
    }))

  it.effect("a body of a content type the route does not take is 415 in the contract's shape", () =>
    Effect.gen(function*() {
      const { base, token } = yield* Env
      for (
        const type of [
          "text/plain",
          "application/xml",
          "multipart/form-data; boundary=x",
          "application/x-www-form-urlencoded"
        ]
      ) {
        const res = yield* call(base, "POST", "/v1/auth/api-keys", {
          token,
          raw: "name=k",
          headers: { "content-type": type }
        })
        expectRefusal(res, 415, "unsupported_media_type")
        expect(res.json).toEqual({ error: expect.any(String), code: "unsupported_media_type" })
      }
      // Public routes too.
      const signUp = yield* call(base, "POST", "/v1/auth/sign-up", {
        raw: "x",
        headers: { "content-type": "text/csv" }
      })
      expectRefusal(signUp, 415, "unsupported_media_type")
      // The content type's parameters do not matter.
      const ok = yield* call(base, "POST", "/v1/auth/api-keys", {
        token,
        raw: JSON.stringify({ name: "typed" }),
        headers: { "content-type": "application/json; charset=utf-8" }
      })
      expect(ok.status).toBe(201)
    }))

  it.effect("requests Node cannot parse are answered with the contract's body too", () =>
    Effect.gen(function*() {
      const { port } = yield* Env
      const malformed = parseRaw(yield* raw(port, "GET /v1/health HTTP/1.1\r\nHost: x\r\nthis is not a header\r\n\r\n"))
      expect(malformed.status).toBe(400)
      expect(malformed.headers["content-type"]).toMatch(/^application\/json/)
      expect(malformed.body).toEqual({ error: expect.any(String), code: "invalid_request" })
      const garbage = parseRaw(yield* raw(port, "\u0001\u0002 nonsense\r\n\r\n"))
      expect(garbage.status).toBe(400)
      expect(garbage.body.code).toBe("invalid_request")
      const huge = parseRaw(
        yield* raw(port, `GET /v1/health HTTP/1.1\r\nHost: x\r\nx-big: ${"a".repeat(20_000)}\r\n\r\n`)
      )
      expect(huge.status).toBe(431)
      expect(huge.body).toEqual({ error: expect.any(String), code: "payload_too_large" })
      expect(huge.headers["x-request-id"]).toMatch(/^req_/)
    }))
})
