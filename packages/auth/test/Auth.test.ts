/** packages/auth on its own: the token bucket, password hashing, cookie security, the dev org. */
import { describe, expect, it } from "@effect/vitest"
import type { ApiKeyId, OrgId } from "@svc/domain/Ids"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { randomBytes, scryptSync } from "node:crypto"
import { ApiKeys } from "../src/ApiKeys.ts"
import { operatorContext } from "../src/Audit.ts"
import * as Passwords from "../src/Auth/Passwords.ts"
import * as AuthLayer from "../src/AuthLayer.ts"
import { cookieSecure, defaults, isLoopbackHost } from "../src/Config.ts"
import { ensureDevOrg } from "../src/DevOrg.ts"
import { take } from "../src/RateLimit.ts"

describe("token bucket", () => {
  const config = { perSecond: 2, burst: 3 }

  it("starts full, refuses when empty with the seconds until the next token, refills with time", () => {
    let bucket = take(undefined, 0, config).bucket
    expect(take(undefined, 0, config).allowed).toBe(true)
    bucket = take(bucket, 0, config).bucket
    const third = take(bucket, 0, config)
    expect(third.allowed).toBe(true)
    const refused = take(third.bucket, 0, config)
    expect(refused).toMatchObject({ allowed: false, retryAfterS: 1 })
    // Half a second at 2/s is one token.
    const later = take(refused.bucket, 500, config)
    expect(later.allowed).toBe(true)
    expect(take(later.bucket, 500, config).allowed).toBe(false)
    // Never above the burst, however long the pause.
    let full = take(later.bucket, 3_600_000, config)
    let allowed = 0
    while (full.allowed) {
      allowed++
      full = take(full.bucket, 3_600_000, config)
    }
    expect(allowed).toBe(3)
  })

  it("a slow rate gives a longer Retry-After; a clock going back refills nothing", () => {
    const slow = { perSecond: 0.1, burst: 1 }
    const first = take(undefined, 1000, slow)
    const refused = take(first.bucket, 1000, slow)
    expect(refused).toMatchObject({ allowed: false, retryAfterS: 10 })
    expect(take(refused.bucket, 0, slow).allowed).toBe(false)
  })
})

describe("passwords", () => {
  it.effect("argon2id with a per-user salt; verification in constant time; malformed hashes never verify", () =>
    Effect.gen(function*() {
      const a = yield* Passwords.hash("correct horse battery staple")
      const b = yield* Passwords.hash("correct horse battery staple")
      expect(a).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$/)
      expect(a).not.toBe(b)
      expect(Passwords.needsRehash(a)).toBe(false)
      expect(yield* Passwords.verify("correct horse battery staple", a)).toBe(true)
      expect(yield* Passwords.verify("correct horse battery stapl", a)).toBe(false)
      expect(yield* Passwords.verify("correct horse battery staple", Passwords.DUMMY_HASH)).toBe(false)
      for (
        const stored of [
          "",
          "plain",
          "scrypt$99$8$1$AAAA$AAAA",
          "scrypt$15$8$1$$",
          a.replace("m=19456", "m=99999999"),
          a.replace("$argon2id$", "$argon2i$"),
          a.slice(0, -10)
        ]
      ) {
        expect(yield* Passwords.verify("correct horse battery staple", stored)).toBe(false)
      }
      // Unicode normalisation: the same text typed two ways is the same password.
      const nfc = yield* Passwords.hash("caf\u00e9 au lait!")
      expect(yield* Passwords.verify("cafe\u0301 au lait!", nfc)).toBe(true)
    }))

  it.effect("hashes of the earlier scrypt format (N = 2^15) still verify and need a rehash", () =>
    Effect.gen(function*() {
      const salt = randomBytes(16)
      const key = scryptSync("an old password", salt, 32, { N: 2 ** 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 })
      const old = `scrypt$15$8$1$${salt.toString("base64")}$${key.toString("base64")}`
      expect(yield* Passwords.verify("an old password", old)).toBe(true)
      expect(yield* Passwords.verify("another password", old)).toBe(false)
      expect(Passwords.needsRehash(old)).toBe(true)
      // Argon2id at other parameters is upgraded too.
      expect(Passwords.needsRehash((yield* Passwords.hash("x")).replace("t=2", "t=1"))).toBe(true)
    }))
})

describe("cookie security", () => {
  it("Secure unless the server listens on loopback, unless forced", () => {
    for (const host of ["127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"]) expect(isLoopbackHost(host)).toBe(true)
    for (const host of ["0.0.0.0", "10.0.0.1", "api.example.com", "::"]) expect(isLoopbackHost(host)).toBe(false)
    expect(cookieSecure(defaults, "127.0.0.1")).toBe(false)
    expect(cookieSecure(defaults, "0.0.0.0")).toBe(true)
    expect(cookieSecure({ ...defaults, cookieSecure: true }, "127.0.0.1")).toBe(true)
    expect(cookieSecure({ ...defaults, cookieSecure: false }, "0.0.0.0")).toBe(false)
  })
})

describe("ensureDevOrg", () => {
  const services = AuthLayer.operatorLayer.pipe(Layer.provideMerge(TestDatabase.layer))

  it.live("creates the dev org and a * key once, reuses them while the key works, re-mints when it does not", () =>
    Effect.gen(function*() {
      const first = yield* ensureDevOrg()
      expect(first.minted).toBe(true)
      expect(first.org_id).toMatch(/^org_/)
      const keys = yield* ApiKeys
      const principal = yield* keys.verify(first.api_key)
      expect(principal.grant.full).toBe(true)
      expect(principal.user).toBeNull()

      expect(yield* ensureDevOrg(first)).toEqual({ ...first, minted: false })
      // Revoked: a new key for the same org.
      yield* keys.revoke(first.org_id as OrgId, principal.credential.id as ApiKeyId, operatorContext)
      const second = yield* ensureDevOrg(first)
      expect(second.minted).toBe(true)
      expect(second.org_id).toBe(first.org_id)
      expect(second.api_key).not.toBe(first.api_key)
      // Lost file: the same dev org, a new key; garbage in the file: the same.
      for (const existing of [null, { org_id: first.org_id, api_key: "svc_live_nonsense" }, { api_key: 5 } as never]) {
        const again = yield* ensureDevOrg(existing)
        expect(again.org_id).toBe(first.org_id)
        expect(again.minted).toBe(true)
      }
      const sql = yield* SqlClient.SqlClient
      const orgs = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM orgs`
      expect(orgs[0]!.n).toBe(1)
    }).pipe(Effect.provide(services)))
})
