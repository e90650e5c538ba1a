/**
 * Secret values at rest (docs/architecture.md#data-and-messages: secret values are stored
 * encrypted). `seal` turns a plaintext into a self-describing text, `open` turns it back:
 *
 *   v1.<keyId>.<base64url(nonce | ciphertext | tag)>
 *
 * AES-256-GCM (node:crypto), a random 12-byte nonce per seal, a 16-byte tag. The additional
 * authenticated data is `v1.<keyId>` plus the caller's optional `aad` (the row or purpose the
 * value belongs to, e.g. a webhook id): a sealed value copied to another row, or to another
 * key id, does not open.
 *
 * Keys come from `SVC_ENCRYPTION_KEYS` (`Config.ts`): comma-separated `keyId:base64key` entries,
 * 32 bytes each. The FIRST seals; every one opens, so a rotation prepends the new key and keeps
 * the old ones until nothing sealed with them is left. Unset, or a malformed entry, fails the
 * layer with a ConfigError; the error names the entry's position, never what it holds.
 */
import { Context, Effect, Layer, Schema } from "effect"
import * as crypto from "node:crypto"
import { ENCRYPTION_KEYS_VARIABLE, type EncryptionKey, EncryptionKeys, KEY_BYTES, KEY_ID } from "./Config.ts"

export const SEALED_VERSION = "v1"

const ALGORITHM = "aes-256-gcm"
const NONCE_BYTES = 12
const TAG_BYTES = 16
const BASE64URL = /^[A-Za-z0-9_-]+$/

/** Why a sealed value does not open. The message never holds the value nor the plaintext. */
export class SecretBoxError extends Schema.TaggedError<SecretBoxError>()("SecretBoxError", {
  /**
   * `malformed`: not `v1.<keyId>.<base64url>` (a plaintext from before sealing, a truncated
   * value); `unknown_key`: sealed with a key id that is not configured; `rejected`: the tag does
   * not verify (tampered, another key with that id, or another AAD).
   */
  reason: Schema.Literals(["malformed", "unknown_key", "rejected"]),
  message: Schema.String
}) {}

const aadOf = (keyId: string, aad: string | undefined) =>
  Buffer.from(`${SEALED_VERSION}.${keyId}\u0000${aad ?? ""}`, "utf8")

const refuse = (reason: SecretBoxError["reason"], message: string) =>
  Effect.fail(new SecretBoxError({ reason, message }))

export class SecretBox extends Context.Service<SecretBox, {
  /** Seals with the first key. `aad` binds the value to where it is stored (open needs the same). */
  readonly seal: (plaintext: string, aad?: string) => Effect.Effect<string>
  readonly open: (sealed: string, aad?: string) => Effect.Effect<string, SecretBoxError>
}>()("@svc/crypto/SecretBox") {
  static readonly make = (keys: ReadonlyArray<EncryptionKey>) => {
    if (keys.length === 0) throw new Error("SecretBox needs at least one key")
    for (const k of keys) {
      if (!KEY_ID.test(k.id) || k.key.length !== KEY_BYTES) {
        throw new Error(`SecretBox: key ${JSON.stringify(k.id)} is not a ${KEY_BYTES}-byte key with a valid id`)
      }
    }
    // Key objects made once: a raw key is converted into one on every cipher otherwise (about
    // 35 µs of CPU each time, two thirds of a small seal's cost).
    const byId = new Map(keys.map((k) => [k.id, crypto.createSecretKey(k.key)]))
    const sealing = { id: keys[0]!.id, key: byId.get(keys[0]!.id)! }

    const seal = (plaintext: string, aad?: string) =>
      Effect.sync(() => {
        const nonce = crypto.randomBytes(NONCE_BYTES)
        const cipher = crypto.createCipheriv(ALGORITHM, sealing.key, nonce, { authTagLength: TAG_BYTES })
        cipher.setAAD(aadOf(sealing.id, aad))
        const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
        const payload = Buffer.concat([nonce, ciphertext, cipher.getAuthTag()]).toString("base64url")
        return `${SEALED_VERSION}.${sealing.id}.${payload}`
      })

    const open = (sealed: string, aad?: string) =>
      Effect.suspend(() => {
        const parts = sealed.split(".")
        if (
          parts.length !== 3 || parts[0] !== SEALED_VERSION || !KEY_ID.test(parts[1]!) || !BASE64URL.test(parts[2]!)
        ) {
          return refuse("malformed", `not a ${SEALED_VERSION} sealed value`)
        }
        const keyId = parts[1]!
        const key = byId.get(keyId)
        if (key === undefined) {
          return refuse("unknown_key", `sealed with key id ${keyId}, which ${ENCRYPTION_KEYS_VARIABLE} does not list`)
        }
        const payload = Buffer.from(parts[2]!, "base64url")
        if (payload.length < NONCE_BYTES + TAG_BYTES) {
          return refuse("malformed", `not a ${SEALED_VERSION} sealed value (too short)`)
        }
        try {
          const decipher = crypto.createDecipheriv(ALGORITHM, key, payload.subarray(0, NONCE_BYTES), {
            authTagLength: TAG_BYTES
          })
          decipher.setAAD(aadOf(keyId, aad))
          decipher.setAuthTag(payload.subarray(payload.length - TAG_BYTES))
          const plaintext = Buffer.concat([
            decipher.update(payload.subarray(NONCE_BYTES, payload.length - TAG_BYTES)),
            decipher.final()
          ])
          return Effect.succeed(plaintext.toString("utf8"))
        } catch {
          return refuse(
            "rejected",
            `the sealed value does not verify under key id ${keyId} (tampered, another key, or sealed for another record)`
          )
        }
      })

    return SecretBox.of({ seal, open })
  }

  /** Keys from `SVC_ENCRYPTION_KEYS`; unset or malformed fails the layer with a ConfigError. */
  static readonly layer = Layer.effect(SecretBox)(Effect.map(EncryptionKeys, SecretBox.make))

  /** Given keys (tests); the first seals. */
  static readonly layerWith = (keys: ReadonlyArray<EncryptionKey>) => Layer.sync(SecretBox)(() => SecretBox.make(keys))
}
