/**
 * Sign-up, sign-in, sessions and their cookie, CSRF refusal, sign-out, the org routes and the
 * audit log, over real HTTP against a real Postgres and NATS.
 */
import { expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import { SESSION_COOKIE } from "@svc/domain/Api/Auth"
import { makeOffsetClock } from "@svc/testing/OffsetClock"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { type Answer, call as http, serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { Clock, ConfigProvider, Context, Effect, Exit, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { SqlClient } from "effect/sql"
import * as Server from "../../src/Server.ts"

/** Every call names its user agent, which the audit log records. */
const call = (base: string, method: string, path: string, options: Parameters<typeof http>[3] = {}) =>
  http(base, method, path, { ...options, headers: { "user-agent": "auth-test/1.0", ...options.headers } })

/** `name=value` of the session cookie set by a response. */
const sessionCookie = (res: Answer) => {
  const set = res.headers.get("set-cookie")
  expect(set).toMatch(new RegExp(`^${SESSION_COOKIE.replace(".", "\\.")}=`))
  return set!.split(";")[0]!
}

class Env extends Context.Service<Env, {
  readonly base: string
  /** A server that believes it is not on loopback (Secure cookies). */
  readonly exposed: string
  readonly advanceClock: (ms: number) => void
  readonly sql: SqlClient.SqlClient
}>()("test/Auth/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const platform = yield* Layer.build(Layer.mergeAll(TestDatabase.layer, TestNats.layer, SecretBox.layer))
    const api = (settings: Record<string, string>, extra: Layer.Layer<never>) =>
      HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
        Layer.provide(extra),
        Layer.provide(ConfigProvider.layerAdd(ConfigProvider.fromUnknown(settings), { asPrimary: true })),
        Layer.provide(Layer.succeedContext(platform))
      )
    const offset = makeOffsetClock()
    // These tests sign in and up many times from 127.0.0.1: not about the per-address limit
    // (Abuse.test.ts is).
    const unlimited = { SVC_SIGN_IN_RATE_PER_MINUTE: "100000", SVC_SIGN_IN_RATE_BURST: "100000" }
    const base = yield* serve(api(unlimited, Layer.succeed(Clock.Clock, offset.clock)))
    const exposed = yield* serve(api({ ...unlimited, SVC_HOST: "0.0.0.0" }, Layer.empty))
    return Env.of({ base, exposed, advanceClock: offset.advance, sql: Context.get(platform, SqlClient.SqlClient) })
  })
)

const signUp = (base: string, email: string, orgName = "Org", headers: Record<string, string> = {}) =>
  call(base, "POST", "/v1/auth/sign-up", {
    body: { email, password: "a good long password", org_name: orgName },
    headers
  })

layer(EnvLayer, { excludeTestServices: true })("sign-up, sessions, org, audit", (it) => {
  it.effect("sign-up creates the org and its first user, signs in, and sets the session cookie", () =>
    Effect.gen(function*() {
      const { base } = yield* Env
      const res = yield* signUp(base, "  Founder@Example.COM ", "Founders")
      expect(res.status).toBe(201)
      expect(res.body).toEqual({
        user: { id: expect.stringMatching(/^usr_/), email: "founder@example.com", createdAt: expect.any(String) },
        org: { id: expect.stringMatching(/^org_/), name: "Founders", createdAt: expect.any(String) }
      })
      const set = res.headers.get("set-cookie")!
      const attributes = set.split(";").map((s) => s.trim().toLowerCase())
      expect(attributes).toContain("httponly")
      expect(attributes).toContain("samesite=lax")
      expect(attributes).toContain("path=/")
      // Loopback: no Secure (plain-HTTP development).
      expect(attributes).not.toContain("secure")
      const expires = Date.parse(
        set.split(";").find((a) => a.trim().toLowerCase().startsWith("expires="))!.split("=")[1]!
      )
      expect(expires - Date.now()).toBeGreaterThan(6 * 24 * 3600 * 1000)
      const cookie = sessionCookie(res)
      expect(cookie.length).toBe(SESSION_COOKIE.length + 1 + 43)
      const me = yield* call(base, "GET", "/v1/me", { headers: { cookie } })
      expect(me.status).toBe(200)
      expect(me.body).toEqual({
        org: { id: res.body.org.id, name: "Founders" },
        user: { id: res.body.user.id, email: "founder@example.com" },
        credential: {
          type: "session",
          id: expect.stringMatching(/^ses_/),
          scopes: ["*"],
          expiresAt: expect.any(String)
        }
      })
      // The session token is stored hashed only.
      const { sql } = yield* Env
      const token = cookie.slice(SESSION_COOKIE.length + 1)
      const rows = yield* sql<
        { n: number }
      >`SELECT count(*)::int AS n FROM sessions WHERE token_hash = ${token} OR id = ${token}`
      expect(rows[0]!.n).toBe(0)
    }))

  it.effect("the cookie is Secure when the server is not on loopback", () =>
    Effect.gen(function*() {
      const { exposed } = yield* Env
      const res = yield* signUp(exposed, "secure@example.com")
      expect(res.status).toBe(201)
      expect(res.headers.get("set-cookie")!.split(";").map((s) => s.trim().toLowerCase())).toContain("secure")
    }))

  it.effect("sign-up refuses bad input (without echoing the password) and a taken email in any case", () =>
    Effect.gen(function*() {
      const { base } = yield* Env
      expect((yield* signUp(base, "taken@example.com")).status).toBe(201)
      const again = yield* signUp(base, "TAKEN@example.com ")
      expect(again.status).toBe(409)
      expect(again.body.code).toBe("conflict")
      for (
        const body of [
          { email: "not-an-email", password: "long enough pw", org_name: "x" },
          { email: "a@b", password: "long enough pw", org_name: "x" },
          { email: `${"x".repeat(250)}@example.com`, password: "long enough pw", org_name: "x" },
          { email: "short@example.com", password: "Sev3n!!", org_name: "x" },
          { email: "long@example.com", password: "p".repeat(257), org_name: "x" },
          { email: "org@example.com", password: "long enough pw", org_name: "" },
          { email: "org@example.com", password: "long enough pw", org_name: "x".repeat(121) },
          { email: "org@example.com", password: "long enough pw" },
          { email: 1, password: "long enough pw", org_name: "x" }
        ]
      ) {
        const res = yield* call(base, "POST", "/v1/auth/sign-up", { body })
        expect({ body, status: res.status, code: res.body.code }).toEqual({
          body,
          status: 400,
          code: "invalid_request"
        })
        if (typeof body.password === "string") expect(res.text).not.toContain(body.password)
      }
      expect(
        (yield* call(base, "POST", "/v1/auth/sign-up", {
          body: { email: "edge@example.com", password: "p".repeat(256), org_name: "x".repeat(120) }
        })).status
      ).toBe(201)
      expect(
        (yield* call(base, "POST", "/v1/auth/sign-up", {
          body: { email: "edge8@example.com", password: "8 chars!", org_name: "x" }
        })).status
      ).toBe(201)
    }))

  it.effect("sign-in: the right password signs in; a wrong email and a wrong password fail the same way", () =>
    Effect.gen(function*() {
      const { base } = yield* Env
      const up = yield* signUp(base, "signin@example.com", "Sign In Co")
      const ok = yield* call(base, "POST", "/v1/auth/sign-in", {
        body: { email: " SignIn@Example.com", password: "a good long password" }
      })
      expect(ok.status).toBe(200)
      expect(ok.body.user.id).toBe(up.body.user.id)
      expect(ok.body.org).toEqual(up.body.org)
      const cookie = sessionCookie(ok)
      expect(cookie).not.toBe(sessionCookie(up))
      expect((yield* call(base, "GET", "/v1/auth/me", { headers: { cookie } })).body.user.email).toBe(
        "signin@example.com"
      )
      const wrongPassword = yield* call(base, "POST", "/v1/auth/sign-in", {
        body: { email: "signin@example.com", password: "a bad long password" }
      })
      const wrongEmail = yield* call(base, "POST", "/v1/auth/sign-in", {
        body: { email: "nobody@example.com", password: "a good long password" }
      })
      expect(wrongPassword.status).toBe(401)
      expect(wrongPassword.text).toBe(wrongEmail.text)
      expect(wrongEmail.status).toBe(401)
      expect(wrongEmail.body.code).toBe("unauthenticated")
      expect(wrongPassword.headers.get("set-cookie")).toBeNull()
      expect(wrongPassword.text).not.toContain("a bad long password")
      for (const body of [{}, { email: "signin@example.com" }, { email: 1, password: 2 }]) {
        expect((yield* call(base, "POST", "/v1/auth/sign-in", { body })).status).toBe(400)
      }
    }))

  it.effect("CSRF: cookie requests that change state need the server's own Origin; reads and bearer keys do not", () =>
    Effect.gen(function*() {
      const { base } = yield* Env
      const cookie = sessionCookie(yield* signUp(base, "csrf@example.com"))
      const body = { name: "from the dashboard" }
      for (const origin of [undefined, "https://evil.example", "null", "http://127.0.0.1:1", "not a url"]) {
        const headers: Record<string, string> = { cookie }
        if (origin !== undefined) headers.origin = origin
        const res = yield* call(base, "POST", "/v1/auth/api-keys", { body, headers })
        expect({ origin, status: res.status, code: res.body.code }).toEqual({
          origin,
          status: 403,
          code: "csrf_rejected"
        })
        const patch = yield* call(base, "PATCH", "/v1/org", { body: { name: "pwned" }, headers })
        expect(patch.status).toBe(403)
      }
      const same = yield* call(base, "POST", "/v1/auth/api-keys", { body, headers: { cookie, origin: base } })
      expect(same.status).toBe(201)
      // Reads need no Origin.
      expect((yield* call(base, "GET", "/v1/auth/api-keys", { headers: { cookie } })).status).toBe(200)
      // A bearer key is not ambient: any Origin.
      const bearer = yield* call(base, "POST", "/v1/auth/api-keys", {
        body,
        headers: { authorization: `Bearer ${same.body.token}`, origin: "https://elsewhere.example" }
      })
      expect(bearer.status).toBe(201)
      // No login CSRF: a foreign page cannot sign a browser in.
      const login = yield* call(base, "POST", "/v1/auth/sign-in", {
        body: { email: "csrf@example.com", password: "a good long password" },
        headers: { origin: "https://evil.example" }
      })
      expect(login.status).toBe(403)
      expect(login.body.code).toBe("csrf_rejected")
      expect(login.headers.get("set-cookie")).toBeNull()
    }))

  it.effect("sign-out ends the session server-side and clears the cookie", () =>
    Effect.gen(function*() {
      const { base } = yield* Env
      const cookie = sessionCookie(yield* signUp(base, "signout@example.com"))
      const other = sessionCookie(
        yield* call(base, "POST", "/v1/auth/sign-in", {
          body: { email: "signout@example.com", password: "a good long password" }
        })
      )
      expect((yield* call(base, "POST", "/v1/auth/sign-out", { headers: { cookie } })).status).toBe(403)
      const out = yield* call(base, "POST", "/v1/auth/sign-out", { headers: { cookie, origin: base } })
      expect(out.status).toBe(204)
      const cleared = out.headers.get("set-cookie")!
      expect(cleared).toMatch(new RegExp(`^${SESSION_COOKIE.replace(".", "\\.")}=;`))
      expect(cleared.toLowerCase()).toMatch(/max-age=0|expires=thu, 01 jan 1970/)
      // The old cookie no longer works, even if the browser kept it.
      const after = yield* call(base, "GET", "/v1/auth/me", { headers: { cookie } })
      expect(after.status).toBe(401)
      expect(after.body.code).toBe("unauthenticated")
      // Other sessions of the user are separate.
      expect((yield* call(base, "GET", "/v1/auth/me", { headers: { cookie: other } })).status).toBe(200)
      // Garbage cookies are plain 401s.
      for (const value of ["", "x", "a".repeat(43), "a".repeat(10_000)]) {
        const res = yield* call(base, "GET", "/v1/auth/me", { headers: { cookie: `${SESSION_COOKIE}=${value}` } })
        expect(res.status).toBe(401)
      }
    }))

  it.effect("sessions expire (controlled clock)", () =>
    Effect.gen(function*() {
      const { base, advanceClock } = yield* Env
      const cookie = sessionCookie(yield* signUp(base, "expiry@example.com"))
      advanceClock(7 * 24 * 3600 * 1000 - 60_000)
      expect((yield* call(base, "GET", "/v1/auth/me", { headers: { cookie } })).status).toBe(200)
      advanceClock(60_001)
      expect((yield* call(base, "GET", "/v1/auth/me", { headers: { cookie } })).status).toBe(401)
    }))

  it.effect("GET and PATCH /v1/org; the new name shows at once, also to cached keys", () =>
    Effect.gen(function*() {
      const { base } = yield* Env
      const up = yield* signUp(base, "org@example.com", "Before")
      const cookie = sessionCookie(up)
      const key = yield* call(base, "POST", "/v1/auth/api-keys", {
        body: { name: "k" },
        headers: { cookie, origin: base }
      })
      const auth = { authorization: `Bearer ${key.body.token}` }
      expect((yield* call(base, "GET", "/v1/auth/me", { headers: auth })).body.org.name).toBe("Before")
      const org = yield* call(base, "GET", "/v1/org", { headers: auth })
      expect(org.body).toEqual(up.body.org)
      const renamed = yield* call(base, "PATCH", "/v1/org", { body: { name: "After" }, headers: auth })
      expect(renamed.status).toBe(200)
      expect(renamed.body).toEqual({ ...up.body.org, name: "After" })
      expect((yield* call(base, "GET", "/v1/auth/me", { headers: auth })).body.org.name).toBe("After")
      expect((yield* call(base, "GET", "/v1/me", { headers: { cookie } })).body.org.name).toBe("After")
      for (const body of [{}, { name: "" }, { name: "x".repeat(121) }, { name: "tab\there" }]) {
        const bad = yield* call(base, "PATCH", "/v1/org", { body, headers: auth })
        expect(bad.status).toBe(400)
        expect(bad.body.code).toBe("invalid_request")
      }
    }))

  it.effect("the audit log: entries for each change with actor, IP, user agent and target; filter and paging", () =>
    Effect.gen(function*() {
      const { base } = yield* Env
      const up = yield* signUp(base, "audit@example.com", "Audited")
      const cookie = sessionCookie(up)
      const userId = up.body.user.id
      const key = yield* call(base, "POST", "/v1/auth/api-keys", {
        body: { name: "k" },
        headers: { cookie, origin: base }
      })
      const auth = { authorization: `Bearer ${key.body.token}` }
      const second = yield* call(base, "POST", "/v1/auth/api-keys", { body: { name: "k2" }, headers: auth })
      yield* call(base, "DELETE", `/v1/auth/api-keys/${second.body.id}`, { headers: auth })
      yield* call(base, "PATCH", "/v1/org", { body: { name: "Audited 2" }, headers: auth })
      yield* call(base, "POST", "/v1/auth/sign-in", {
        body: { email: "audit@example.com", password: "wrong password!" }
      })
      yield* call(base, "POST", "/v1/auth/sign-out", { headers: { cookie, origin: base } })

      const all = yield* call(base, "GET", "/v1/audit", { headers: auth })
      expect(all.status).toBe(200)
      const actions = all.body.entries.map((e: { action: string }) => e.action)
      expect(actions).toEqual([
        "auth.signed_out",
        "auth.sign_in_failed",
        "org.updated",
        "apikey.revoked",
        "apikey.created",
        "apikey.created",
        "auth.signed_in",
        "auth.signed_up",
        "org.created"
      ])
      expect(all.body).toMatchObject({ total: 9, offset: 0, limit: 50, has_more: false })
      const byAction = (a: string) => all.body.entries.filter((e: { action: string }) => e.action === a)
      const [created2, created1] = byAction("apikey.created")
      expect(created1).toEqual({
        id: expect.stringMatching(/^aud_/),
        action: "apikey.created",
        actor: { type: "user", id: userId },
        target_id: key.body.id,
        ip: "127.0.0.1",
        user_agent: "auth-test/1.0",
        createdAt: expect.any(String)
      })
      expect(created2.actor).toEqual({ type: "api_key", id: key.body.id })
      expect(created2.target_id).toBe(second.body.id)
      expect(byAction("apikey.revoked")[0]).toMatchObject({
        actor: { type: "api_key", id: key.body.id },
        target_id: second.body.id
      })
      expect(byAction("org.updated")[0]).toMatchObject({ actor: { type: "api_key" }, target_id: up.body.org.id })
      expect(byAction("auth.sign_in_failed")[0]).toMatchObject({
        actor: { type: "anonymous", id: null },
        target_id: userId
      })
      expect(all.text).not.toContain(key.body.token)

      const filtered = yield* call(base, "GET", "/v1/audit?action=apikey.created&limit=1", { headers: auth })
      expect(filtered.body.entries.map((e: { target_id: string }) => e.target_id)).toEqual([second.body.id])
      expect(filtered.body).toMatchObject({ total: 2, offset: 0, limit: 1, has_more: true })
      const page2 = yield* call(base, "GET", "/v1/audit?action=apikey.created&limit=1&offset=1", { headers: auth })
      expect(page2.body.entries[0].target_id).toBe(key.body.id)
      expect(page2.body.has_more).toBe(false)
      for (const q of ["action=apikey.*", "action=nope", "limit=0", "offset=x"]) {
        const bad = yield* call(base, "GET", `/v1/audit?${q}`, { headers: auth })
        expect({ q, status: bad.status }).toEqual({ q, status: 400 })
      }
      // Only this org's entries, and only for * keys.
      const stranger = sessionCookie(yield* signUp(base, "stranger@example.com"))
      const theirs = yield* call(base, "GET", "/v1/audit", { headers: { cookie: stranger } })
      expect(theirs.text).not.toContain(up.body.org.id)
      const scoped = yield* call(base, "POST", "/v1/auth/api-keys", {
        body: { name: "s", scopes: ["apps:read"] },
        headers: auth
      })
      const refused = yield* call(base, "GET", "/v1/audit", {
        headers: { authorization: `Bearer ${scoped.body.token}` }
      })
      expect(refused.status).toBe(403)
      expect(refused.body.code).toBe("full_access_required")
    }))

  it.effect("the audit log is append-only: the database refuses UPDATE, DELETE and TRUNCATE", () =>
    Effect.gen(function*() {
      const { sql } = yield* Env
      const before = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM audit_log`
      expect(before[0]!.n).toBeGreaterThan(0)
      for (
        const statement of [
          sql`UPDATE audit_log SET action = 'org.updated'`,
          sql`DELETE FROM audit_log`,
          sql`TRUNCATE audit_log`
        ]
      ) {
        const exit = yield* Effect.exit(statement)
        expect(Exit.isFailure(exit)).toBe(true)
      }
      const after = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM audit_log`
      expect(after[0]!.n).toBe(before[0]!.n)
    }))
})
