import { describe, expect, it } from "@effect/vitest"
import { Result, Schema } from "effect"
import * as ApiKeyToken from "../src/ApiKeyToken.ts"

const reason = (input: string) => {
  const r = ApiKeyToken.parse(input)
  return Result.isFailure(r) ? r.failure : "ok"
}

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

describe("ApiKeyToken", () => {
  it("mints svc_live_ + 32 random base62 + 6 checksum characters", () => {
    const { token, prefix, hash } = ApiKeyToken.mint()
    expect(token).toMatch(/^svc_live_[0-9A-Za-z]{38}$/)
    expect(token.length).toBe(ApiKeyToken.TOKEN_LENGTH)
    const body = token.slice("svc_live_".length)
    expect(body.slice(32)).toBe(ApiKeyToken.checksum(body.slice(0, 32)))
    expect(prefix).toBe(token.slice(0, 17))
    expect(prefix).toMatch(/^svc_live_[0-9A-Za-z]{8}$/)
    expect(hash).toMatch(/^[0-9a-f]{64}$/)
    expect(hash).toBe(ApiKeyToken.hash(token))
    expect(reason(token)).toBe("ok")
  })

  it("mints distinct tokens using the whole alphabet", () => {
    const tokens = Array.from({ length: 300 }, () => ApiKeyToken.mint().token)
    expect(new Set(tokens).size).toBe(tokens.length)
    const used = new Set(tokens.flatMap((t) => Array.from(t.slice(9, 41))))
    expect(used.size).toBe(62)
  })

  it("checksum detects every single changed character", () => {
    const { token } = ApiKeyToken.mint()
    for (let i = 9; i < token.length; i++) {
      for (const c of BASE62) {
        if (c === token[i]) continue
        const changed = token.slice(0, i) + c + token.slice(i + 1)
        expect(reason(changed)).toBe("bad_checksum")
      }
    }
  })

  it("checksum is fixed-width base62 (leading zeros kept)", () => {
    for (let i = 0; i < 200; i++) {
      expect(ApiKeyToken.checksum(ApiKeyToken.mint().token.slice(9, 41))).toMatch(/^[0-9A-Za-z]{6}$/)
    }
    // Reference values computed with Python's zlib.crc32 and an independent base62 encoder.
    expect(ApiKeyToken.checksum("0".repeat(32))).toBe("2wjyrI")
    expect(ApiKeyToken.checksum("a".repeat(32))).toBe("3i8aJj")
  })

  it("refuses malformed inputs with a reason", () => {
    const { token } = ApiKeyToken.mint()
    const body = token.slice(9)
    expect(reason("")).toBe("empty")
    expect(reason("svc_test_" + body)).toBe("wrong_prefix")
    expect(reason("SVC_LIVE_" + body)).toBe("wrong_prefix")
    expect(reason(" " + token)).toBe("wrong_prefix")
    expect(reason("Bearer " + token)).toBe("wrong_prefix")
    expect(reason("svc_live_")).toBe("wrong_length")
    expect(reason(token.slice(0, -1))).toBe("wrong_length")
    expect(reason(token + "a")).toBe("wrong_length")
    expect(reason(token + " ")).toBe("wrong_length")
    expect(reason("svc_live_" + "a".repeat(1_000_000))).toBe("wrong_length")
    expect(reason(token.slice(0, 20) + "-" + token.slice(21))).toBe("bad_charset")
    expect(reason(token.slice(0, 20) + "é" + token.slice(21))).toBe("bad_charset")
    expect(reason(token.slice(0, 20) + "\u0000" + token.slice(21))).toBe("bad_charset")
    // An astral character is two UTF-16 units: the length check catches it first.
    expect(reason(token.slice(0, 20) + "😀" + token.slice(21))).toBe("wrong_length")
    expect(reason(token.slice(0, -6) + "000000")).toBe(
      token.endsWith("000000") ? "ok" : "bad_checksum"
    )
  })

  it("has a schema for well-formed tokens", () => {
    const { token } = ApiKeyToken.mint()
    const is = Schema.is(ApiKeyToken.ApiKeyTokenSchema)
    expect(is(token)).toBe(true)
    expect(is(token.slice(0, -1) + (token.endsWith("a") ? "b" : "a"))).toBe(false)
    expect(is(42)).toBe(false)
  })

  it("hashes the whole token with SHA-256", () => {
    expect(ApiKeyToken.hash("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
  })

  it("compares hashes in constant time, unequal lengths unequal", () => {
    const a = ApiKeyToken.mint().hash
    const b = ApiKeyToken.mint().hash
    expect(ApiKeyToken.hashesEqual(a, a)).toBe(true)
    expect(ApiKeyToken.hashesEqual(a, b)).toBe(false)
    expect(ApiKeyToken.hashesEqual(a, a.slice(1))).toBe(false)
    expect(ApiKeyToken.hashesEqual(a, "")).toBe(false)
    expect(ApiKeyToken.hashesEqual("", "")).toBe(true)
    // Same string length, different byte length: must not throw.
    expect(ApiKeyToken.hashesEqual("é".repeat(4), "abcd")).toBe(false)
  })
})
