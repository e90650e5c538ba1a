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
 * Keys come from `SVC_ENCRYPTION_KEYS`: comma-separated `keyId:base64key` entries, 32 bytes
 * each. The FIRST seals; every one opens, so a rotation prepends the new key and keeps the old
 * ones until nothing sealed with them is left. Unset, or a malformed entry, fails the layer with
 * a ConfigError; the error names the entry's position, never what it holds.
 */
import { Config, Context, Effect, Layer, Option, Redacted, Result, Schema, SchemaIssue } from "effect"
import * as crypto from "node:crypto"

export const SEALED_VERSION = "v1"
export const ENCRYPTION_KEYS_VARIABLE = "SVC_ENCRYPTION_KEYS"

const ALGORITHM = "aes-256-gcm"
const KEY_BYTES = 32
const NONCE_BYTES = 12
const TAG_BYTES = 16
const KEY_ID = /^[A-Za-z0-9_-]{1,64}$/
/** 32 bytes as base64 (padded) or base64url (unpadded): nothing else, so no byte is guessed. */
const KEY_BASE64 = /^(?:[A-Za-z0-9+/]{43}=|[A-Za-z0-9_-]{43})$/
const BASE64URL = /^[A-Za-z0-9_-]+$/

export interface EncryptionKey {
  /** Written into every value it seals; letters, digits, `_` and `-`, at most 64. */
  readonly id: string
  readonly key: Uint8Array
}

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

/** Parses `SVC_ENCRYPTION_KEYS`; a failure says which entry (1-based) and why, not its text. */
export const parseEncryptionKeys = (text: string): Result.Result<ReadonlyArray<EncryptionKey>, string> => {
  const entries = text.split(",")
  const keys: Array<EncryptionKey> = []
  const total = entries.length
  for (const [i, raw] of entries.entries()) {
    const where = `entry ${i + 1} of ${total}`
    const entry = raw.trim()
    if (entry === "") return Result.fail(`${where} is empty`)
    const colon = entry.indexOf(":")
    if (colon < 0) return Result.fail(`${where} is not keyId:base64key`)
    const id = entry.slice(0, colon)
    const encoded = entry.slice(colon + 1)
    if (!KEY_ID.test(id)) return Result.fail(`${where}: the key id must be 1 to 64 letters, digits, '_' or '-'`)
    if (!KEY_BASE64.test(encoded)) return Result.fail(`${where}: the key must be ${KEY_BYTES} bytes in base64`)
    if (keys.some((k) => k.id === id)) return Result.fail(`${where} repeats the key id of an earlier entry`)
    keys.push({ id, key: new Uint8Array(Buffer.from(encoded, encoded.endsWith("=") ? "base64" : "base64url")) })
  }
  return Result.succeed(keys)
}

/** A new `keyId:base64key` entry (32 bytes from the CSPRNG), for `svc dev` and operators. */
export const generateEncryptionKey = (id: string): string => {
  if (!KEY_ID.test(id)) throw new Error("a key id is 1 to 64 letters, digits, '_' or '-'")
  return `${id}:${crypto.randomBytes(KEY_BYTES).toString("base64")}`
}

const configError = (message: string) =>
  new Config.ConfigError(new Schema.SchemaError(new SchemaIssue.InvalidValue({ message: `${ENCRYPTION_KEYS_VARIABLE}: ${message}` })))

/** `SVC_ENCRYPTION_KEYS`, required: there is no plaintext fallback. */
export const EncryptionKeysConfig: Config.Config<ReadonlyArray<EncryptionKey>> = Config.option(
  Config.Redacted(ENCRYPTION_KEYS_VARIABLE)
).pipe(
  Config.mapEffect((value) => {
    const text = Option.isSome(value) ? Redacted.value(value.value).trim() : ""
    if (text === "") {
      return Effect.fail(configError(
        "not set. The api and dispatcher roles seal and open secrets with it: comma-separated " +
          "keyId:base64key entries of 32-byte keys (e.g. main:$(openssl rand -base64 32)); the first seals, all open. " +
          "`svc dev` generates one into .svc/encryption-keys."
      ))
    }
    return Result.match(parseEncryptionKeys(text), {
      onSuccess: (keys) => Effect.succeed(keys),
      onFailure: (message) => Effect.fail(configError(message))
    })
  })
)

const aadOf = (keyId: string, aad: string | undefined) => Buffer.from(`${SEALED_VERSION}.${keyId}\u0000${aad ?? ""}`, "utf8")

const refuse = (reason: SecretBoxError["reason"], message: string) => Effect.fail(new SecretBoxError({ reason, message }))

export class SecretBox extends Context.Service<SecretBox, {
  /** Seals with the first key. `aad` binds the value to where it is stored (open needs the same). */
  readonly seal: (plaintext: string, aad?: string) => Effect.Effect<string>
  readonly open: (sealed: string, aad?: string) => Effect.Effect<string, SecretBoxError>
}>()("@svc/crypto/SecretBox") {
  static readonly make = (keys: ReadonlyArray<EncryptionKey>) => {
    if (keys.length === 0) throw new Error("SecretBox needs at least one key")
    for (const k of keys) {
      if (!KEY_ID.test(k.id) || k.key.length !== KEY_BYTES) throw new Error(`SecretBox: key ${JSON.stringify(k.id)} is not a ${KEY_BYTES}-byte key with a valid id`)
    }
    const sealing = keys[0]!
    const byId = new Map(keys.map((k) => [k.id, k.key]))

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
        if (parts.length !== 3 || parts[0] !== SEALED_VERSION || !KEY_ID.test(parts[1]!) || !BASE64URL.test(parts[2]!)) {
          return refuse("malformed", `not a ${SEALED_VERSION} sealed value`)
        }
        const keyId = parts[1]!
        const key = byId.get(keyId)
        if (key === undefined) return refuse("unknown_key", `sealed with key id ${keyId}, which ${ENCRYPTION_KEYS_VARIABLE} does not list`)
        const payload = Buffer.from(parts[2]!, "base64url")
        if (payload.length < NONCE_BYTES + TAG_BYTES) return refuse("malformed", `not a ${SEALED_VERSION} sealed value (too short)`)
        try {
          const decipher = crypto.createDecipheriv(ALGORITHM, key, payload.subarray(0, NONCE_BYTES), { authTagLength: TAG_BYTES })
          decipher.setAAD(aadOf(keyId, aad))
          decipher.setAuthTag(payload.subarray(payload.length - TAG_BYTES))
          const plaintext = Buffer.concat([decipher.update(payload.subarray(NONCE_BYTES, payload.length - TAG_BYTES)), decipher.final()])
          return Effect.succeed(plaintext.toString("utf8"))
        } catch {
          return refuse("rejected", `the sealed value does not verify under key id ${keyId} (tampered, another key, or sealed for another record)`)
        }
      })

    return SecretBox.of({ seal, open })
  }

  /** Keys from `SVC_ENCRYPTION_KEYS`; unset or malformed fails the layer with a ConfigError. */
  static readonly layer = Layer.effect(SecretBox)(Effect.map(EncryptionKeysConfig, SecretBox.make))

  /** Given keys (tests); the first seals. */
  static readonly layerWith = (keys: ReadonlyArray<EncryptionKey>) => Layer.sync(SecretBox)(() => SecretBox.make(keys))
}
