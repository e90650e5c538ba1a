/**
 * API keys over real HTTP, with TWO API servers sharing one Postgres and one NATS (each with its
 * own verification cache and bus connection, as two processes would have): the token format,
 * mint/list/revoke contracts, the scope grammar of docs/contract.md#scopes at mint, expiry under a
 * controlled clock, revocation seen at once by the other server, the distrust fallback when a
 * process does not acknowledge, rotation, lastUsedAt, the rate limit, and that no token ever
 * reaches a log line.
 */
import { expect, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import { SESSION_COOKIE } from "@svc/domain/Api/Auth"
import * as Token from "@svc/domain/ApiKeyToken"
import { makeId } from "@svc/domain/Ids"
import { makeOffsetClock } from "@svc/testing/OffsetClock"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { type Answer, call, serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { Clock, ConfigProvider, Context, Effect, Layer, Logger, References } from "effect"
import { HttpRouter } from "effect/http"
import { SqlClient } from "effect/sql"
import * as Server from "../../src/Server.ts"

// ---------------------------------------------------------------------------------------------
// The environment

class Env extends Context.Service<Env, {
  /** Server 1 (with the controllable clock) and server 2. */
  readonly one: string
  readonly two: string
  /** A signed-in user's session cookie and a `*` key of that user, both org A. */
  readonly cookie: string
  readonly star: string
  readonly advanceClock: (ms: number) => void
  readonly logs: ReadonlyArray<string>
  /** Every token minted in this file, to search the logs for at the end. */
  readonly tokens: Set<string>
  readonly sql: SqlClient.SqlClient
  readonly nats: Nats["Service"]
}>()("test/Keys/Env") {}

const settings = (overrides: Record<string, string>) =>
  ConfigProvider.layerAdd(ConfigProvider.fromUnknown(overrides), { asPrimary: true })

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const platform = yield* Layer.build(Layer.mergeAll(TestDatabase.layer, TestNats.layer, SecretBox.layer))
    const logs: Array<string> = []
    // Every log line of both servers, at every level, request logs included.
    const captureLogs = Layer.mergeAll(
      Logger.layer([Logger.map(Logger.formatLogFmt, (line) => void logs.push(String(line)))], {
        mergeWithExisting: false
      }),
      Layer.succeed(References.MinimumLogLevel, "Trace")
    )
    const api = (extra: Layer.Layer<never>) =>
      HttpRouter.serve(Server.Routes, { disableListenLog: true }).pipe(
        Layer.provide(extra),
        Layer.provide(captureLogs),
        Layer.provide(settings({
          SVC_KEY_LAST_USED_INTERVAL: "100ms",
          SVC_RATE_LIMIT_PER_SECOND: "100000",
          SVC_RATE_LIMIT_BURST: "100000",
          // Revoked, expired and malformed keys by the dozen from 127.0.0.1: the per-address
          // limit of failures is Abuse.test.ts's subject, not this file's.
          SVC_FAILED_AUTH_RATE_PER_MINUTE: "100000",
          SVC_FAILED_AUTH_RATE_BURST: "100000"
        })),
        Layer.provide(Layer.succeedContext(platform))
      )
    const offset = makeOffsetClock()
    const one = yield* serve(api(Layer.succeed(Clock.Clock, offset.clock)))
    const two = yield* serve(api(Layer.empty))

    const up = yield* call(one, "POST", "/v1/auth/sign-up", {
      body: { email: "keys@example.com", password: "a long enough password", org_name: "Keys" }
    })
    expect(up.status).toBe(201)
    const cookie = up.headers.get("set-cookie")!.split(";")[0]!
    const minted = yield* call(one, "POST", "/v1/auth/api-keys", {
      body: { name: "root" },
      headers: { cookie, origin: one }
    })
    expect(minted.status).toBe(201)
    return Env.of({
      one,
      two,
      cookie,
      star: minted.body.token,
      advanceClock: offset.advance,
      logs,
      tokens: new Set([minted.body.token, cookie.slice(SESSION_COOKIE.length + 1)]),
      sql: Context.get(platform, SqlClient.SqlClient),
      nats: Context.get(platform, Nats)
    })
  })
)

const mint = (env: Env["Service"], body: Record<string, unknown>, token = env.star, base = env.one) =>
  Effect.map(call(base, "POST", "/v1/auth/api-keys", { token, body }), (a) => {
    if (typeof a.body?.token === "string") env.tokens.add(a.body.token)
    return a
  })

const ROW_KEYS = ["createdAt", "expiresAt", "id", "lastUsedAt", "name", "prefix", "revokedAt", "scopes"]

layer(EnvLayer, { excludeTestServices: true })("API keys", (it) => {
  it.effect("a minted key: svc_live_ token with a checksum, shown once, row fields exactly those of the contract", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const res = yield* mint(env, { name: "ci" })
      expect(res.status).toBe(201)
      const token: string = res.body.token
      expect(token).toMatch(/^svc_live_[0-9A-Za-z]{38}$/)
      expect(Token.isWellFormed(token)).toBe(true)
      // The checksum catches any changed character.
      const flipped = token.slice(0, 20) + (token[20] === "a" ? "b" : "a") + token.slice(21)
      expect(Token.isWellFormed(flipped)).toBe(false)
      expect(res.body.prefix).toBe(token.slice(0, "svc_live_".length + 8))
      expect(Object.keys(res.body).sort()).toEqual([...ROW_KEYS, "token"].sort())
      expect(res.body.id).toMatch(/^key_[0-9a-z]{26}$/)
      expect(res.body.scopes).toEqual(["*"])
      expect(res.body.lastUsedAt).toBeNull()
      expect(res.body.expiresAt).toBeNull()
      expect(res.body.revokedAt).toBeNull()
      expect(res.body.createdAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
      // Stored as SHA-256 only.
      const stored = yield* env.sql<{ token_hash: string }>`SELECT token_hash FROM api_keys WHERE id = ${res.body.id}`
      expect(stored[0]!.token_hash).toBe(Token.hash(token))
      const anywhere = yield* env.sql<{ n: number }>`
        SELECT count(*)::int AS n FROM api_keys WHERE position(${token} in (id || name || prefix || token_hash || array_to_string(scopes, ','))) > 0
      `
      expect(anywhere[0]!.n).toBe(0)
      // It works, on both servers.
      expect((yield* call(env.one, "GET", "/v1/auth/me", { token })).body.credential.id).toBe(res.body.id)
      expect((yield* call(env.two, "GET", "/v1/auth/me", { token })).status).toBe(200)
      // Never again: not in the list.
      const list = yield* call(env.one, "GET", "/v1/auth/api-keys", { token: env.star })
      expect(list.text).not.toContain(token)
      for (const row of list.body.keys) expect(Object.keys(row).sort()).toEqual(ROW_KEYS)
    }))

  it.effect("the scope grammar at mint: every example of the contract's scopes", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const sandbox = makeId("sandbox")
      const accepted: Array<ReadonlyArray<string>> = [
        ["*"],
        ["sandboxes:read"],
        ["sandboxes:write"],
        ["templates:read", "volumes:write", "apps:read"],
        ["secrets:read"],
        ["secrets:write"],
        ["secrets:use"],
        ["sandboxes"],
        ["sandboxes:*"],
        ["secrets"],
        ["secrets:*"],
        [`sandbox:${sandbox}`],
        [`sandbox:${sandbox}`, "templates:read"]
      ]
      for (const scopes of accepted) {
        const res = yield* mint(env, { name: "s", scopes })
        expect({ scopes, status: res.status }).toEqual({ scopes, status: 201 })
        expect(res.body.scopes).toEqual(scopes)
      }
      const rejected: Array<ReadonlyArray<string>> = [
        ["sandboxes:use"],
        ["templates:use"],
        ["sandbox:*"],
        ["sandbox:"],
        ["sandbox:not-an-id"],
        [`sandbox:${makeId("template")}`],
        ["widgets:read"],
        ["sandboxes:read:extra"],
        ["SANDBOXES:read"],
        ["sandboxes:"],
        [":read"],
        [""],
        [" *"],
        ["*", `sandbox:${sandbox}`],
        [`sandbox:${sandbox}`, `sandbox:${makeId("sandbox")}`],
        []
      ]
      for (const scopes of rejected) {
        const res = yield* mint(env, { name: "s", scopes })
        expect({ scopes, status: res.status, code: res.body?.code }).toEqual({
          scopes,
          status: 400,
          code: "invalid_scope"
        })
        expect(res.text).not.toContain("svc_live_")
      }
      // Duplicates collapse; omitted scopes are ["*"].
      expect((yield* mint(env, { name: "s", scopes: ["apps:read", "apps:read"] })).body.scopes).toEqual(["apps:read"])
      expect((yield* mint(env, { name: "s" })).body.scopes).toEqual(["*"])
      // null is the same as omitted.
      expect((yield* mint(env, { name: "s", scopes: null })).body.scopes).toEqual(["*"])
      // Not a list of strings: a request error.
      for (const scopes of ["*", [1], {}]) {
        const res = yield* mint(env, { name: "s", scopes })
        expect(res.status).toBe(400)
        expect(res.body.code).toBe("invalid_request")
      }
    }))

  it.effect("mint validation: name 1 to 120 characters, expires_at in the future, key management needs *", () =>
    Effect.gen(function*() {
      const env = yield* Env
      expect((yield* mint(env, { name: "x".repeat(120) })).status).toBe(201)
      for (
        const body of [{ name: "" }, { name: "x".repeat(121) }, {}, { name: 5 }, { name: "ok", expires_at: "tomorrow" }]
      ) {
        const res = yield* mint(env, body)
        expect(res.status).toBe(400)
        expect(res.body.code).toBe("invalid_request")
      }
      const past = yield* mint(env, { name: "old", expires_at: new Date(Date.now() - 60_000).toISOString() })
      expect(past.status).toBe(400)
      expect(past.body.issues).toEqual([{ path: "expires_at", message: "must be in the future" }])
      const scoped = yield* mint(env, { name: "scoped", scopes: ["sandboxes:write"] })
      for (
        const [method, path, body] of [
          ["POST", "/v1/auth/api-keys", { name: "by scoped" }],
          ["GET", "/v1/auth/api-keys", undefined],
          ["DELETE", `/v1/auth/api-keys/${scoped.body.id}`, undefined]
        ] as const
      ) {
        const res = yield* call(env.one, method, path, { token: scoped.body.token, ...(body ? { body } : {}) })
        expect(res.status).toBe(403)
        expect(res.body.code).toBe("full_access_required")
      }
    }))

  it.effect("keys belong to the user who minted them; a userless key mints userless keys", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const me = (yield* call(env.one, "GET", "/v1/auth/me", { token: env.star })).body
      expect(me.user.email).toBe("keys@example.com")
      const child = yield* mint(env, { name: "child" })
      expect((yield* call(env.one, "GET", "/v1/auth/me", { token: child.body.token })).body.user).toEqual(me.user)
      // A service key (as the operator CLI mints) and what it mints.
      yield* env.sql`UPDATE api_keys SET user_id = NULL WHERE id = ${child.body.id}`
      const service = (yield* call(env.two, "GET", "/v1/auth/me", { token: child.body.token })).body
      expect(service.user).toBeNull()
      const grandchild = yield* mint(env, { name: "grandchild" }, child.body.token, env.two)
      expect((yield* call(env.two, "GET", "/v1/auth/me", { token: grandchild.body.token })).body.user).toBeNull()
    }))

  it.effect("list: newest first, paging with total/offset/limit/has_more, revoked keys included", () =>
    Effect.gen(function*() {
      const env = yield* Env
      // A fresh org keeps the counts exact.
      const up = yield* call(env.one, "POST", "/v1/auth/sign-up", {
        body: { email: "lists@example.com", password: "another long password", org_name: "Lists" }
      })
      const cookie = up.headers.get("set-cookie")!.split(";")[0]!
      env.tokens.add(cookie.slice(SESSION_COOKIE.length + 1))
      const ids: Array<string> = []
      for (const name of ["k1", "k2", "k3"]) {
        const res = yield* call(env.one, "POST", "/v1/auth/api-keys", {
          body: { name },
          headers: { cookie, origin: env.one }
        })
        env.tokens.add(res.body.token)
        ids.push(res.body.id)
      }
      yield* call(env.one, "DELETE", `/v1/auth/api-keys/${ids[0]}`, { headers: { cookie, origin: env.one } })
      const all = yield* call(env.one, "GET", "/v1/auth/api-keys", { headers: { cookie } })
      expect(all.body.keys.map((k: { id: string }) => k.id)).toEqual([...ids].reverse())
      expect(all.body).toMatchObject({ total: 3, offset: 0, limit: 50, has_more: false })
      expect(all.body.keys[2].revokedAt).not.toBeNull()
      const page = yield* call(env.one, "GET", "/v1/auth/api-keys?limit=2&offset=1", { headers: { cookie } })
      expect(page.body.keys.map((k: { id: string }) => k.id)).toEqual([ids[1], ids[0]])
      expect(page.body).toMatchObject({ total: 3, offset: 1, limit: 2, has_more: false })
      const first = yield* call(env.one, "GET", "/v1/auth/api-keys?limit=1", { headers: { cookie } })
      expect(first.body).toMatchObject({ total: 3, offset: 0, limit: 1, has_more: true })
      for (const q of ["limit=0", "limit=501", "offset=-1", "limit=1.5", "limit=abc"]) {
        const bad = yield* call(env.one, "GET", `/v1/auth/api-keys?${q}`, { headers: { cookie } })
        expect({ q, status: bad.status, code: bad.body.code }).toEqual({ q, status: 400, code: "invalid_request" })
      }
      // Another org's keys are not listed.
      const theirs = yield* call(env.one, "GET", "/v1/auth/api-keys", { token: env.star })
      for (const id of ids) expect(theirs.text).not.toContain(id)
    }))

  it.effect("revoke: 200 with revokedAt, again the same row; unknown or foreign 404; malformed id 400", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const key = yield* mint(env, { name: "to revoke" })
      const first = yield* call(env.one, "DELETE", `/v1/auth/api-keys/${key.body.id}`, { token: env.star })
      expect(first.status).toBe(200)
      expect(Object.keys(first.body).sort()).toEqual(ROW_KEYS)
      expect(first.body.revokedAt).not.toBeNull()
      const again = yield* call(env.two, "DELETE", `/v1/auth/api-keys/${key.body.id}`, { token: env.star })
      expect(again.status).toBe(200)
      expect(again.body).toEqual(first.body)
      const entries = yield* env.sql<{ n: number }>`
        SELECT count(*)::int AS n FROM audit_log WHERE action = 'apikey.revoked' AND target_id = ${key.body.id}
      `
      expect(entries[0]!.n).toBe(1)
      const unknown = yield* call(env.one, "DELETE", `/v1/auth/api-keys/${makeId("apiKey")}`, { token: env.star })
      expect(unknown.status).toBe(404)
      expect(unknown.body.code).toBe("not_found")
      const malformed = yield* call(env.one, "DELETE", "/v1/auth/api-keys/nope", { token: env.star })
      expect(malformed.status).toBe(400)
      expect(malformed.body.code).toBe("invalid_request")
    }))

  it.effect("a revocation is seen by the other API server as soon as DELETE returns (both ways)", () =>
    Effect.gen(function*() {
      const env = yield* Env
      for (const [revokeOn, useOn] of [[env.one, env.two], [env.two, env.one]] as const) {
        const key = yield* mint(env, { name: "shared" })
        const token = key.body.token
        // Cached on both.
        for (let i = 0; i < 3; i++) {
          expect((yield* call(useOn, "GET", "/v1/auth/me", { token })).status).toBe(200)
          expect((yield* call(revokeOn, "GET", "/v1/auth/me", { token })).status).toBe(200)
        }
        expect((yield* call(revokeOn, "DELETE", `/v1/auth/api-keys/${key.body.id}`, { token: env.star })).status).toBe(
          200
        )
        const after = yield* call(useOn, "GET", "/v1/auth/me", { token })
        expect(after.status).toBe(401)
        expect(after.body).toEqual({ error: expect.any(String), code: "unauthenticated" })
        expect(after.headers.get("www-authenticate")).toBe("Bearer")
        expect((yield* call(revokeOn, "GET", "/v1/auth/me", { token })).status).toBe(401)
      }
    }))

  it.effect("a process that does not acknowledge a revocation makes the others distrust their caches", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const cached = yield* mint(env, { name: "cached on two" })
      expect((yield* call(env.two, "GET", "/v1/auth/me", { token: cached.body.token })).status).toBe(200)
      // Revoked behind the platform's back (no broadcast): server two's cache still trusts it,
      // which is what the cache is for.
      yield* env.sql`UPDATE api_keys SET revoked_at = now() WHERE id = ${cached.body.id}`
      expect((yield* call(env.two, "GET", "/v1/auth/me", { token: cached.body.token })).status).toBe(200)
      // A registered API process that never answers.
      env.nats.connection.publish(
        env.nats.subject("auth", "presence"),
        new TextEncoder().encode(JSON.stringify({ process: "api_ghost", state: "alive" }))
      )
      yield* Effect.promise(() => env.nats.connection.flush())
      const other = yield* mint(env, { name: "revoked while a ghost is registered" })
      const revoked = yield* call(env.one, "DELETE", `/v1/auth/api-keys/${other.body.id}`, { token: env.star })
      expect(revoked.status).toBe(200)
      // The acknowledgement was missing: server two now checks Postgres on every request.
      expect((yield* call(env.two, "GET", "/v1/auth/me", { token: cached.body.token })).status).toBe(401)
      expect(env.logs.some((l) => l.includes("not acknowledged by every API process"))).toBe(true)
      env.nats.connection.publish(
        env.nats.subject("auth", "presence"),
        new TextEncoder().encode(JSON.stringify({ process: "api_ghost", state: "bye" }))
      )
    }))

  it.effect("rotation: mint the replacement, use both, revoke the old one; old 401, new 200", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const old = yield* mint(env, { name: "deploy v1", scopes: ["sandboxes:write"] })
      const replacement = yield* mint(env, { name: "deploy v2", scopes: ["sandboxes:write"] })
      for (const base of [env.one, env.two]) {
        expect((yield* call(base, "GET", "/v1/auth/me", { token: old.body.token })).status).toBe(200)
        expect((yield* call(base, "GET", "/v1/auth/me", { token: replacement.body.token })).status).toBe(200)
      }
      expect((yield* call(env.two, "DELETE", `/v1/auth/api-keys/${old.body.id}`, { token: env.star })).status).toBe(200)
      for (const base of [env.one, env.two]) {
        expect((yield* call(base, "GET", "/v1/auth/me", { token: old.body.token })).status).toBe(401)
        expect((yield* call(base, "GET", "/v1/auth/me", { token: replacement.body.token })).status).toBe(200)
      }
    }))

  it.effect("expiry with a controlled clock: valid before expires_at, 401 after, even when cached", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const expiresAt = new Date(Date.now() + 60 * 60 * 1000).toISOString()
      const key = yield* mint(env, { name: "one hour", expires_at: expiresAt })
      expect(key.status).toBe(201)
      expect(key.body.expiresAt).toBe(expiresAt)
      const me = yield* call(env.one, "GET", "/v1/auth/me", { token: key.body.token })
      expect(me.status).toBe(200)
      expect(me.body.credential.expiresAt).toBe(expiresAt)
      env.advanceClock(59 * 60 * 1000)
      expect((yield* call(env.one, "GET", "/v1/auth/me", { token: key.body.token })).status).toBe(200)
      env.advanceClock(60 * 1000 + 1)
      const after = yield* call(env.one, "GET", "/v1/auth/me", { token: key.body.token })
      expect(after.status).toBe(401)
      expect(after.body.code).toBe("unauthenticated")
    }))

  it.effect("lastUsedAt is written off the request path, in batches", () =>
    Effect.gen(function*() {
      const env = yield* Env
      // Server two: its clock is the real one, like the database's.
      const key = yield* mint(env, { name: "used" }, env.star, env.two)
      for (let i = 0; i < 5; i++) yield* call(env.two, "GET", "/v1/auth/me", { token: key.body.token })
      let row: any
      for (let i = 0; i < 100; i++) {
        const list = yield* call(env.two, "GET", "/v1/auth/api-keys?limit=500", { token: env.star })
        row = list.body.keys.find((k: { id: string }) => k.id === key.body.id)
        if (row.lastUsedAt !== null) break
        yield* Effect.sleep("50 millis")
      }
      expect(row.lastUsedAt).not.toBeNull()
      expect(Date.parse(row.lastUsedAt)).toBeGreaterThanOrEqual(Date.parse(key.body.createdAt))
    }))

  it.effect("the per-key rate limit: 429 rate_limited with Retry-After, per credential", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const platform = Layer.merge(
        Layer.succeedContext(Context.make(SqlClient.SqlClient, env.sql).pipe(Context.add(Nats, env.nats))),
        SecretBox.layer
      )
      const limited = yield* serve(
        HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
          Layer.provide(settings({ SVC_RATE_LIMIT_PER_SECOND: "1", SVC_RATE_LIMIT_BURST: "3" })),
          Layer.provide(platform)
        )
      )
      const a = yield* mint(env, { name: "busy" })
      const b = yield* mint(env, { name: "quiet" })
      const statuses: Array<number> = []
      let refused: Answer | undefined
      for (let i = 0; i < 4; i++) {
        const res = yield* call(limited, "GET", "/v1/auth/me", { token: a.body.token })
        statuses.push(res.status)
        if (res.status === 429) refused = res
      }
      expect(statuses).toEqual([200, 200, 200, 429])
      expect(refused!.body).toEqual({ error: expect.any(String), code: "rate_limited", retry_after_s: 1 })
      expect(refused!.headers.get("retry-after")).toBe("1")
      // Another key has its own bucket.
      expect((yield* call(limited, "GET", "/v1/auth/me", { token: b.body.token })).status).toBe(200)
    }))

  it.effect("no token ever appears in a log line or an error body", () =>
    Effect.gen(function*() {
      const env = yield* Env
      // Failures that involve tokens: malformed, unknown, in the query string, revoked.
      const probe = yield* mint(env, { name: "probe" })
      const token: string = probe.body.token
      const errors = [
        // Its last character changed (a token ending in "0" stayed itself, and valid: CI saw a 200).
        yield* call(env.one, "GET", "/v1/auth/me", { token: token.slice(0, -1) + (token.endsWith("0") ? "1" : "0") }),
        yield* call(env.one, "GET", "/v1/auth/me", { token: Token.mint().token }),
        yield* call(env.one, "GET", `/v1/auth/me?token=${token}`),
        yield* call(env.one, "GET", "/v1/auth/me", { headers: { authorization: `Basic ${token}` } })
      ]
      yield* call(env.one, "DELETE", `/v1/auth/api-keys/${probe.body.id}`, { token: env.star })
      errors.push(yield* call(env.two, "GET", "/v1/auth/me", { token }))
      for (const e of errors) {
        expect(e.status).toBe(401)
        expect(e.text).not.toContain(token)
        expect(e.text).not.toContain(token.slice(9))
      }
      // Request logs of both servers and whatever else was logged by every test of this file.
      expect(env.logs.some((l) => l.includes("http.url=/v1/auth/me"))).toBe(true)
      expect(env.tokens.size).toBeGreaterThan(1)
      for (const secret of env.tokens) {
        const leaking = env.logs.filter((l) => l.includes(secret) || l.includes(secret.slice(9)))
        // The ?token= request's URL is the one place a client put it; the request log must not echo it.
        expect(leaking).toEqual([])
      }
    }))
})
