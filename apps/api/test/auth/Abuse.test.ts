/**
 * Abuse of the credential paths, over real HTTP against a real Postgres and NATS (issue 9,
 * "Abuse"): sign-in and sign-up limited per client address, failed credentials limited per
 * client address before they cost a lookup (5,000 unknown keys), the refused-key cache,
 * `X-Forwarded-For` believed only from `SVC_TRUSTED_PROXIES`, the per-account sign-in backoff
 * and its bounded audit rows, and password hashes upgraded at sign-in.
 *
 * Two API servers share the database: `plain` with the default limits (what a deployment gets),
 * `proxied` behind a "proxy" at 127.0.0.1 (`SVC_TRUSTED_PROXIES`), where each request names its
 * client in `X-Forwarded-For` so a test can be many addresses. Both run on a wall clock that
 * stands still until the test moves it (token buckets refill, backoffs end only then, however
 * slow the machine), while sleeping stays real.
 */
import { expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import { SESSION_COOKIE } from "@svc/domain/Api/Auth"
import * as Token from "@svc/domain/ApiKeyToken"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { type Answer, call, serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { Clock, ConfigProvider, Context, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { SqlClient } from "effect/sql"
import { randomBytes, scryptSync } from "node:crypto"
import * as Server from "../../src/Server.ts"

/** A wall clock that moves only when told to; sleeps are real. */
const standingClock = () => {
  const real = Clock.Clock.defaultValue()
  let now = real.currentTimeMillisUnsafe()
  const clock: Clock.Clock = {
    currentTimeMillisUnsafe: () => now,
    currentTimeMillis: Effect.sync(() => now),
    currentTimeNanosUnsafe: () => BigInt(now) * 1_000_000n,
    currentTimeNanos: Effect.sync(() => BigInt(now) * 1_000_000n),
    monotonicTimeNanosUnsafe: () => real.monotonicTimeNanosUnsafe(),
    monotonicTimeNanos: real.monotonicTimeNanos,
    sleep: (duration) => real.sleep(duration)
  }
  return { clock, advance: (ms: number) => void (now += ms) }
}

class Env extends Context.Service<Env, {
  readonly plain: string
  readonly proxied: string
  readonly advanceClock: (ms: number) => void
  readonly sql: SqlClient.SqlClient
}>()("test/Abuse/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const platform = yield* Layer.build(Layer.mergeAll(TestDatabase.layer, TestNats.layer, SecretBox.layer))
    const offset = standingClock()
    const api = (settings: Record<string, string>) =>
      serve(
        HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
          Layer.provide(Layer.succeed(Clock.Clock, offset.clock)),
          Layer.provide(ConfigProvider.layerAdd(ConfigProvider.fromUnknown(settings), { asPrimary: true })),
          Layer.provide(Layer.succeedContext(platform))
        ),
        { server: Server.makeNodeServer }
      )
    return Env.of({
      plain: yield* api({}),
      proxied: yield* api({ SVC_TRUSTED_PROXIES: "127.0.0.1, ::1" }),
      advanceClock: offset.advance,
      sql: Context.get(platform, SqlClient.SqlClient)
    })
  })
)

let nextAddress = 1
/** A client address of its own (TEST-NET-3), as the trusted proxy would forward it. */
const freshAddress = () => {
  const n = nextAddress++
  return `203.0.${113 + Math.floor(n / 250)}.${n % 250 + 1}`
}
const from = (address: string) => ({ "x-forwarded-for": address })

const signIn = (base: string, email: string, password: string, headers: Record<string, string> = {}) =>
  call(base, "POST", "/v1/auth/sign-in", { body: { email, password }, headers })
const signUp = (base: string, email: string, headers: Record<string, string> = {}) =>
  call(base, "POST", "/v1/auth/sign-up", {
    body: { email, password: "the right password", org_name: "Abuse" },
    headers
  })

/** A 429 of the contract: `rate_limited`, `Retry-After` equal to the body's `retry_after_s`. */
const expectRateLimited = (res: Answer) => {
  expect(res.status, res.text).toBe(429)
  expect(res.json).toEqual({ error: expect.any(String), code: "rate_limited", retry_after_s: expect.any(Number) })
  expect(res.json.retry_after_s).toBeGreaterThanOrEqual(1)
  expect(res.headers.get("retry-after")).toBe(String(res.json.retry_after_s))
  expect(res.headers.get("set-cookie")).toBeNull()
  return res.json.retry_after_s as number
}

/** A signed-up user of the proxied server (from an address of its own) and a `*` key of theirs. */
const account = (email: string) =>
  Effect.gen(function*() {
    const { proxied } = yield* Env
    const up = yield* signUp(proxied, email, from(freshAddress()))
    expect(up.status, up.text).toBe(201)
    const cookie = up.headers.get("set-cookie")!.split(";")[0]!
    const key = yield* call(proxied, "POST", "/v1/auth/api-keys", {
      body: { name: "k" },
      headers: { cookie, origin: proxied }
    })
    expect(key.status).toBe(201)
    return {
      orgId: up.json.org.id as string,
      userId: up.json.user.id as string,
      token: key.json.token as string,
      cookie
    }
  })

/** Runs `count` calls, `concurrency` at a time; their statuses and one answer per status. */
const flood = (count: number, concurrency: number, one: (i: number) => Promise<Response>) =>
  Effect.promise(async () => {
    const statuses = new Map<number, number>()
    const samples = new Map<number, { body: string; retryAfter: string | null }>()
    let next = 0
    const worker = async () => {
      while (next < count) {
        const res = await one(next++)
        const body = await res.text()
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
        if (!samples.has(res.status)) samples.set(res.status, { body, retryAfter: res.headers.get("retry-after") })
      }
    }
    await Promise.all(Array.from({ length: concurrency }, worker))
    return { statuses, samples }
  })

layer(EnvLayer, { excludeTestServices: true })("abuse", (it) => {
  it.effect("sign-in and sign-up share a bucket per client address: the 21st is 429 with Retry-After (defaults)", () =>
    Effect.gen(function*() {
      const { plain, advanceClock } = yield* Env
      const statuses: Array<number> = []
      // Distinct unknown emails: only the per-address limit is at work.
      for (let i = 0; i < 20; i++) {
        statuses.push((yield* signIn(plain, `nobody${i}@example.com`, "a wrong password")).status)
      }
      expect(statuses).toEqual(Array(20).fill(401))
      const refused = yield* signIn(plain, "nobody-more@example.com", "a wrong password")
      // 10 a minute refill: one every 6 s.
      expect(expectRateLimited(refused)).toBe(6)
      expectRateLimited(yield* signUp(plain, "newcomer@example.com"))
      // Nothing was created for the refused sign-up.
      const { sql } = yield* Env
      expect(
        (yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM users WHERE email = 'newcomer@example.com'`)[0]!.n
      ).toBe(0)
      // The header a client sends does not make it another address on a server without trusted proxies.
      expectRateLimited(yield* signIn(plain, "nobody-more@example.com", "a wrong password", from(freshAddress())))
      advanceClock(6_000)
      expect((yield* signUp(plain, "newcomer@example.com")).status).toBe(201)
      expectRateLimited(yield* signIn(plain, "nobody-more@example.com", "a wrong password"))
    }))

  it.effect("5,000 unknown well-formed keys from one address: 20 are looked up, the rest are 429 without a lookup", () =>
    Effect.gen(function*() {
      const { plain, sql, advanceClock } = yield* Env
      const { token } = yield* account("keys@example.com")
      expect((yield* call(plain, "GET", "/v1/auth/me", { token })).status).toBe(200)
      const { statuses, samples } = yield* flood(
        5_000,
        32,
        () => fetch(`${plain}/v1/auth/me`, { headers: { authorization: `Bearer ${Token.mint().token}` } })
      )
      // Nothing but 401 and 429; 401 only for the burst (and what was in flight when it ran out).
      expect([...statuses.keys()].sort()).toEqual([401, 429])
      expect(statuses.get(401)!).toBeGreaterThanOrEqual(20)
      expect(statuses.get(401)!).toBeLessThanOrEqual(20 + 32)
      expect(statuses.get(429)!).toBeGreaterThanOrEqual(5_000 - 20 - 32)
      expect(statuses.get(429)!).toBe(5_000 - statuses.get(401)!)
      const sample = samples.get(429)!
      // 30 a minute refill: one every 2 s.
      expect(JSON.parse(sample.body)).toEqual({ error: expect.any(String), code: "rate_limited", retry_after_s: 2 })
      expect(sample.retryAfter).toBe("2")

      // No lookup happens for them: with the keys table gone a lookup would be 503.
      yield* sql`ALTER TABLE api_keys RENAME TO api_keys_away`
      const blind = yield* flood(
        200,
        8,
        () => fetch(`${plain}/v1/auth/me`, { headers: { authorization: `Bearer ${Token.mint().token}` } })
      )
      // Malformed and session credentials are refused the same way, before their checks.
      const malformed = yield* call(plain, "GET", "/v1/auth/me", { headers: { authorization: "Bearer nonsense" } })
      const session = yield* call(plain, "GET", "/v1/auth/me", {
        headers: { cookie: `${SESSION_COOKIE}=${"a".repeat(43)}` }
      })
      // A key this process verified recently still works: the limit is on failures.
      const known = yield* call(plain, "GET", "/v1/auth/me", { token })
      yield* sql`ALTER TABLE api_keys_away RENAME TO api_keys`
      expect([...blind.statuses.entries()]).toEqual([[429, 200]])
      expectRateLimited(malformed)
      expectRateLimited(session)
      expect(known.status).toBe(200)

      // Failures refill at 30 a minute: two seconds later one more key is looked up.
      advanceClock(2_000)
      const after = yield* call(plain, "GET", "/v1/auth/me", { token: Token.mint().token })
      expect(after.status).toBe(401)
      expect(after.json.code).toBe("unauthenticated")
      expect(after.headers.get("www-authenticate")).toBe("Bearer")
      expectRateLimited(yield* call(plain, "GET", "/v1/auth/me", { token: Token.mint().token }))
    }))

  it.effect("a refused key is remembered: repeating it costs no lookup", () =>
    Effect.gen(function*() {
      const { proxied, sql } = yield* Env
      const { token, cookie } = yield* account("revoker@example.com")
      const other = yield* call(proxied, "POST", "/v1/auth/api-keys", {
        body: { name: "to revoke" },
        headers: { cookie, origin: proxied }
      })
      yield* call(proxied, "DELETE", `/v1/auth/api-keys/${other.json.id}`, { token })
      const unknown = Token.mint().token
      const first = [
        yield* call(proxied, "GET", "/v1/auth/me", { token: unknown, headers: from(freshAddress()) }),
        yield* call(proxied, "GET", "/v1/auth/me", { token: other.json.token, headers: from(freshAddress()) })
      ]
      yield* sql`ALTER TABLE api_keys RENAME TO api_keys_away`
      const again = [
        yield* call(proxied, "GET", "/v1/auth/me", { token: unknown, headers: from(freshAddress()) }),
        yield* call(proxied, "GET", "/v1/auth/me", { token: other.json.token, headers: from(freshAddress()) })
      ]
      const fresh = yield* call(proxied, "GET", "/v1/auth/me", {
        token: Token.mint().token,
        headers: from(freshAddress())
      })
      yield* sql`ALTER TABLE api_keys_away RENAME TO api_keys`
      expect(first.map((r) => r.status)).toEqual([401, 401])
      expect(again.map((r) => [r.status, r.json.code])).toEqual([[401, "unauthenticated"], [401, "unauthenticated"]])
      // A key never seen is looked up (and the missing table shows it).
      expect(fresh.status).toBe(503)
    }))

  it.effect("X-Forwarded-For is believed only from a trusted proxy: separate buckets, the client's address audited", () =>
    Effect.gen(function*() {
      const { proxied, plain } = yield* Env
      // Behind the proxy every forwarded client has its own failure bucket.
      const one = freshAddress()
      for (let i = 0; i < 20; i++) {
        expect((yield* call(proxied, "GET", "/v1/auth/me", { token: Token.mint().token, headers: from(one) })).status)
          .toBe(401)
      }
      expectRateLimited(yield* call(proxied, "GET", "/v1/auth/me", { token: Token.mint().token, headers: from(one) }))
      // A client that prepends a fake address is still itself (the proxy appends the real one).
      expectRateLimited(
        yield* call(proxied, "GET", "/v1/auth/me", { token: Token.mint().token, headers: from(`198.51.100.1, ${one}`) })
      )
      expect(
        (yield* call(proxied, "GET", "/v1/auth/me", { token: Token.mint().token, headers: from(freshAddress()) }))
          .status
      ).toBe(401)
      // Malformed credentials (another scheme, a bad checksum) are failures like unknown keys.
      const two = freshAddress()
      for (let i = 0; i < 10; i++) {
        const basic = yield* call(proxied, "GET", "/v1/auth/me", {
          headers: { ...from(two), authorization: `Basic ${i}` }
        })
        const noise = yield* call(proxied, "GET", "/v1/auth/me", {
          token: `svc_live_${"x".repeat(38)}`,
          headers: from(two)
        })
        expect([basic.status, noise.status]).toEqual([401, 401])
      }
      expectRateLimited(yield* call(proxied, "GET", "/v1/auth/me", { token: Token.mint().token, headers: from(two) }))

      // The audit log records the forwarded client behind the proxy, the peer otherwise.
      const client = freshAddress()
      const { token } = yield* account("audited-ip@example.com")
      const { advanceClock } = yield* Env
      // A minute on: 127.0.0.1's failures on `plain` (the flood above) have refilled, so its
      // first look at this key is allowed. Each call a millisecond apart: the log is newest first.
      advanceClock(60_000)
      expect(
        (yield* call(proxied, "POST", "/v1/auth/api-keys", { token, body: { name: "x" }, headers: from(client) }))
          .status
      )
        .toBe(201)
      advanceClock(1)
      expect(
        (yield* call(plain, "POST", "/v1/auth/api-keys", { token, body: { name: "y" }, headers: from(client) })).status
      )
        .toBe(201)
      const log = yield* call(proxied, "GET", "/v1/audit?action=apikey.created&limit=2", { token })
      expect(log.json.entries.map((e: { ip: string }) => e.ip)).toEqual(["127.0.0.1", client])
    }))

  it.effect("one account's failed sign-ins back off from the fifth, from any address; the right password waits too", () =>
    Effect.gen(function*() {
      const { proxied, advanceClock } = yield* Env
      const { userId } = yield* account("target@example.com")
      const attempt = (password: string) => signIn(proxied, "target@example.com", password, from(freshAddress()))
      for (let i = 0; i < 5; i++) expect((yield* attempt("a wrong password")).status).toBe(401)
      expect(expectRateLimited(yield* attempt("the right password"))).toBe(1)
      advanceClock(1_000)
      expect((yield* attempt("a wrong password")).status).toBe(401)
      expect(expectRateLimited(yield* attempt("a wrong password"))).toBe(2)
      advanceClock(2_000)
      const ok = yield* attempt("the right password")
      expect(ok.status).toBe(200)
      expect(ok.json.user.id).toBe(userId)
      // A success ends the streak: a typo costs nothing again.
      expect((yield* attempt("a wrong password")).status).toBe(401)
      expect((yield* attempt("the right password")).status).toBe(200)

      // An email without an account backs off the same way: the answers do not tell them apart.
      const ghost = (password: string) => signIn(proxied, "ghost@example.com", password, from(freshAddress()))
      for (let i = 0; i < 5; i++) expect((yield* ghost("a wrong password")).status).toBe(401)
      for (let i = 0; i < 5; i++) yield* attempt("a wrong password")
      const [known, unknown] = [yield* attempt("x".repeat(12)), yield* ghost("x".repeat(12))]
      expect(known.text).toBe(unknown.text)
      expect(known.headers.get("retry-after")).toBe(unknown.headers.get("retry-after"))
    }))

  it.effect("a long streak of failures writes a bounded number of audit rows; refused attempts write none", () =>
    Effect.gen(function*() {
      const { proxied, advanceClock } = yield* Env
      const { token } = yield* account("streak@example.com")
      let failed = 0
      let refused = 0
      for (let i = 0; i < 45; i++) {
        const res = yield* signIn(proxied, "streak@example.com", `wrong password ${i}`, from(freshAddress()))
        if (res.status === 401) failed++
        else {
          expectRateLimited(res)
          refused++
        }
        // A quarter of an hour between tries: every backoff (at most 15 minutes) has ended.
        if (i % 2 === 1) advanceClock(15 * 60_000)
      }
      // Five free failures; from then on each one blocks, so every other try is refused.
      expect([failed, refused]).toEqual([25, 20])
      const log = yield* call(proxied, "GET", "/v1/audit?action=auth.sign_in_failed&limit=500", { token })
      // Failures 1 to 5, then the 10th and the 20th: 7 rows for 25 failures and 20 refusals.
      expect(log.json.total).toBe(7)
      expect(log.json.entries.every((e: { actor: { type: string } }) => e.actor.type === "anonymous")).toBe(true)
    }))

  it.effect("a password hash of the earlier format (scrypt N=2^15) signs in and is rewritten as argon2id", () =>
    Effect.gen(function*() {
      const { proxied, sql } = yield* Env
      const { userId } = yield* account("legacy@example.com")
      const stored =
        (yield* sql<{ password_hash: string }>`SELECT password_hash FROM users WHERE id = ${userId}`)[0]!.password_hash
      expect(stored).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$/)
      // What the platform stored before this release.
      const salt = randomBytes(16)
      const key = scryptSync("the old password", salt, 32, { N: 2 ** 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 })
      const legacy = `scrypt$15$8$1$${salt.toString("base64")}$${key.toString("base64")}`
      yield* sql`UPDATE users SET password_hash = ${legacy} WHERE id = ${userId}`
      const hashOf = Effect.map(
        sql<{ password_hash: string }>`SELECT password_hash FROM users WHERE id = ${userId}`,
        (r) => r[0]!.password_hash
      )

      expect((yield* signIn(proxied, "legacy@example.com", "not the old password", from(freshAddress()))).status).toBe(
        401
      )
      expect(yield* hashOf).toBe(legacy)
      expect((yield* signIn(proxied, "legacy@example.com", "the old password", from(freshAddress()))).status).toBe(200)
      const upgraded = yield* hashOf
      expect(upgraded).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$/)
      // The new hash works, and is not rewritten again.
      expect((yield* signIn(proxied, "legacy@example.com", "the old password", from(freshAddress()))).status).toBe(200)
      expect(yield* hashOf).toBe(upgraded)
      expect((yield* signIn(proxied, "legacy@example.com", "not the old password", from(freshAddress()))).status).toBe(
        401
      )
    }))
})
