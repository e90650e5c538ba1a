/** The pure parts of packages/auth: the token bucket, password hashing, cookie security. */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Passwords from "../src/Auth/Passwords.ts"
import { cookieSecure, defaults, isLoopbackHost } from "../src/AuthConfig.ts"
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
  it.effect("scrypt with a per-user salt; verification in constant time; malformed hashes never verify", () =>
    Effect.gen(function*() {
      const a = yield* Passwords.hash("correct horse battery staple")
      const b = yield* Passwords.hash("correct horse battery staple")
      expect(a).toMatch(/^scrypt\$15\$8\$1\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/)
      expect(a).not.toBe(b)
      expect(yield* Passwords.verify("correct horse battery staple", a)).toBe(true)
      expect(yield* Passwords.verify("correct horse battery stapl", a)).toBe(false)
      expect(yield* Passwords.verify("correct horse battery staple", Passwords.DUMMY_HASH)).toBe(false)
      for (const stored of ["", "plain", "scrypt$99$8$1$AAAA$AAAA", "scrypt$15$8$1$$", a.replace("$15$", "$9$")]) {
        expect(yield* Passwords.verify("correct horse battery staple", stored)).toBe(false)
      }
      // Unicode normalisation: the same text typed two ways is the same password.
      const nfc = yield* Passwords.hash("caf\u00e9 au lait!")
      expect(yield* Passwords.verify("cafe\u0301 au lait!", nfc)).toBe(true)
    }))
})

describe("cookie security", () => {
  it("Secure unless the server listens on loopback, unless forced", () => {
    for (const host of ["127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"]) expect(isLoopbackHost(host)).toBe(true)
    for (const host of ["0.0.0.0", "10.0.0.1", "api.example.com", "::"]) expect(isLoopbackHost(host)).toBe(false)
    expect(cookieSecure({ ...defaults, listenHost: "127.0.0.1" })).toBe(false)
    expect(cookieSecure({ ...defaults, listenHost: "0.0.0.0" })).toBe(true)
    expect(cookieSecure({ ...defaults, listenHost: "127.0.0.1", cookieSecure: true })).toBe(true)
    expect(cookieSecure({ ...defaults, listenHost: "0.0.0.0", cookieSecure: false })).toBe(false)
  })
})
