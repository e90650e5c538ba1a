import { assert, describe, expect, it } from "@effect/vitest"
import { EncryptionKeys, generateEncryptionKey, parseEncryptionKeys } from "@svc/crypto/Config"
import { SecretBox, SecretBoxError } from "@svc/crypto/SecretBox"
import { ConfigProvider, Effect, Exit, Layer, Result } from "effect"
import * as crypto from "node:crypto"

const keyText = (id: string) => generateEncryptionKey(id)
const keysOf = (text: string) => {
  const parsed = parseEncryptionKeys(text)
  assert(Result.isSuccess(parsed))
  return parsed.success
}
const boxOf = (text: string) => SecretBox.make(keysOf(text))

/** The error `open` fails with (the test fails if it opens). */
const refusal = (box: SecretBox["Service"], sealed: string, aad?: string) =>
  Effect.gen(function*() {
    const exit = yield* Effect.exit(box.open(sealed, aad))
    assert(Exit.isFailure(exit), "expected open to fail")
    const error = yield* Effect.flip(box.open(sealed, aad))
    expect(error).toBeInstanceOf(SecretBoxError)
    return error
  })

/** Flips one bit of byte `index` of the payload (nonce | ciphertext | tag). */
const flip = (sealed: string, index: (length: number) => number) => {
  const [version, keyId, payload] = sealed.split(".")
  const bytes = Buffer.from(payload!, "base64url")
  const i = index(bytes.length)
  bytes[i] = bytes[i]! ^ 0x01
  return `${version}.${keyId}.${bytes.toString("base64url")}`
}

describe("SecretBox", () => {
  const primary = keyText("k2")
  const box = boxOf(primary)

  it.effect("round trip: the sealed text is v1.<keyId>.<base64url>, differs each time, holds no plaintext", () =>
    Effect.gen(function*() {
      const secret = "whsec_the-plaintext-value-0123456789"
      const a = yield* box.seal(secret, "wh_1")
      const b = yield* box.seal(secret, "wh_1")
      expect(a).toMatch(/^v1\.k2\.[A-Za-z0-9_-]+$/)
      expect(a).not.toBe(b)
      expect(a).not.toContain(secret)
      expect(a).not.toContain(Buffer.from(secret).toString("base64url").slice(0, 12))
      // nonce 12 + ciphertext (as long as the plaintext) + tag 16
      expect(Buffer.from(a.split(".")[2]!, "base64url")).toHaveLength(12 + Buffer.byteLength(secret) + 16)
      expect(yield* box.open(a, "wh_1")).toBe(secret)
      expect(yield* box.open(b, "wh_1")).toBe(secret)
      for (const text of ["", "é and 🔑", "x".repeat(100_000)]) {
        expect(yield* box.open(yield* box.seal(text), undefined)).toBe(text)
      }
    }))

  it.effect("tampering with any part fails with SecretBoxError", () =>
    Effect.gen(function*() {
      const sealed = yield* box.seal("top secret value", "wh_1")
      const [, , payload] = sealed.split(".")
      const cases: ReadonlyArray<readonly [string, string, SecretBoxError["reason"]]> = [
        ["version", sealed.replace(/^v1\./, "v2."), "malformed"],
        ["no version", sealed.replace(/^v1\./, ""), "malformed"],
        ["key id (unknown)", sealed.replace(".k2.", ".k3."), "unknown_key"],
        ["nonce", flip(sealed, () => 0), "rejected"],
        ["ciphertext", flip(sealed, () => 12), "rejected"],
        ["tag", flip(sealed, (n) => n - 1), "rejected"],
        ["truncated", sealed.slice(0, -4), "rejected"],
        ["too short", `v1.k2.${Buffer.alloc(20).toString("base64url")}`, "malformed"],
        ["not base64url", `v1.k2.${payload}+`, "malformed"],
        ["extra part", `${sealed}.x`, "malformed"],
        ["a plaintext", "whsec_plaintext_from_before_sealing", "malformed"]
      ]
      for (const [what, value, reason] of cases) {
        const error = yield* refusal(box, value, "wh_1")
        expect([what, error.reason]).toEqual([what, reason])
        expect(error.message).not.toContain("top secret value")
        expect(error.message).not.toContain(payload!)
      }
    }))

  it.effect("the same key id naming another key does not open (the tag is checked)", () =>
    Effect.gen(function*() {
      const sealed = yield* box.seal("value", "wh_1")
      const impostor = boxOf(keyText("k2"))
      expect((yield* refusal(impostor, sealed, "wh_1")).reason).toBe("rejected")
    }))

  it.effect("the AAD binds the value: another AAD, or none, does not open", () =>
    Effect.gen(function*() {
      const sealed = yield* box.seal("value", "wh_1")
      expect((yield* refusal(box, sealed, "wh_2")).reason).toBe("rejected")
      expect((yield* refusal(box, sealed)).reason).toBe("rejected")
      const unbound = yield* box.seal("value")
      expect((yield* refusal(box, unbound, "wh_1")).reason).toBe("rejected")
      expect(yield* box.open(unbound)).toBe("value")
    }))

  it.effect("rotation: a value sealed with the old key opens after a new key is prepended; new values use the new key", () =>
    Effect.gen(function*() {
      const old = keyText("old")
      const before = boxOf(old)
      const sealedBefore = yield* before.seal("kept across rotation", "wh_9")
      const after = boxOf(`${keyText("new")},${old}`)
      expect(yield* after.open(sealedBefore, "wh_9")).toBe("kept across rotation")
      const sealedAfter = yield* after.seal("fresh", "wh_9")
      expect(sealedAfter).toMatch(/^v1\.new\./)
      // The old configuration cannot open what the new key sealed; it says which key id is missing.
      const error = yield* refusal(before, sealedAfter, "wh_9")
      expect([error.reason, error.message]).toEqual(["unknown_key", expect.stringContaining("new")])
    }))

  describe("SVC_ENCRYPTION_KEYS", () => {
    const read = (env: Record<string, string>) => EncryptionKeys.parse(ConfigProvider.fromEnv({ env }))
    const material = crypto.randomBytes(32)
    const b64 = material.toString("base64")
    const b64url = material.toString("base64url")

    it.effect("reads entries in order: the first seals, base64 or base64url, whitespace around entries ignored", () =>
      Effect.gen(function*() {
        const keys = yield* read({ SVC_ENCRYPTION_KEYS: ` a:${b64} , b_2-x:${b64url}` })
        expect(keys.map((k) => k.id)).toEqual(["a", "b_2-x"])
        expect(Buffer.from(keys[0]!.key).equals(material)).toBe(true)
        expect(Buffer.from(keys[1]!.key).equals(material)).toBe(true)
        const box = SecretBox.make(keys)
        expect(yield* box.seal("x")).toMatch(/^v1\.a\./)
      }))

    it.effect("unset or empty: a ConfigError that says what to set", () =>
      Effect.gen(function*() {
        for (const env of [{}, { SVC_ENCRYPTION_KEYS: "" }, { SVC_ENCRYPTION_KEYS: "  " }]) {
          const error = yield* Effect.flip(read(env))
          expect(error._tag).toBe("ConfigError")
          expect(error.message).toContain("SVC_ENCRYPTION_KEYS: not set")
        }
      }))

    it.effect("a malformed entry fails with a ConfigError naming its position, never its material", () =>
      Effect.gen(function*() {
        const good = `good:${b64}`
        const short = crypto.randomBytes(16).toString("base64")
        const long = crypto.randomBytes(33).toString("base64")
        const cases: ReadonlyArray<readonly [string, string]> = [
          [`${good},${b64}`, "entry 2 of 2 is not keyId:base64key"],
          [`${good},`, "entry 2 of 2 is empty"],
          [`bad.id:${b64}`, "entry 1 of 1: the key id"],
          [`:${b64}`, "entry 1 of 1: the key id"],
          [`${good},short:${short}`, "entry 2 of 2: the key must be 32 bytes"],
          [`long:${long},${good}`, "entry 1 of 2: the key must be 32 bytes"],
          [`x:${b64.slice(0, -2)}!=`, "entry 1 of 1: the key must be 32 bytes"],
          [`${good},good:${b64url}`, "entry 2 of 2 repeats the key id"]
        ]
        for (const [value, expected] of cases) {
          const error = yield* Effect.flip(read({ SVC_ENCRYPTION_KEYS: value }))
          expect(error._tag).toBe("ConfigError")
          expect(error.message).toContain(expected)
          const shown = `${error.message} ${String(error)} ${JSON.stringify(error)}`
          for (const part of value.split(/[,:]/).filter((p) => p.length >= 8)) {
            expect(shown).not.toContain(part)
          }
        }
      }))

    it.effect("the layer fails to build without keys, and builds with them", () =>
      Effect.gen(function*() {
        const build = (env: Record<string, string>) =>
          SecretBox.use((box) => box.seal("x")).pipe(
            Effect.provide(SecretBox.layer.pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env }))))),
            Effect.exit
          )
        const missing = yield* build({})
        assert(Exit.isFailure(missing))
        expect(String(missing)).toContain("SVC_ENCRYPTION_KEYS: not set")
        const bad = yield* build({ SVC_ENCRYPTION_KEYS: `k:${b64},${b64}` })
        assert(Exit.isFailure(bad))
        expect(String(bad)).toContain("entry 2 of 2")
        expect(String(bad)).not.toContain(b64)
        const ok = yield* build({ SVC_ENCRYPTION_KEYS: `k:${b64}` })
        assert(Exit.isSuccess(ok))
        expect(ok.value).toMatch(/^v1\.k\./)
      }))
  })
})
