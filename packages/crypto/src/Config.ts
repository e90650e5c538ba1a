/**
 * The crypto package's one setting, `SVC_ENCRYPTION_KEYS`, and its grammar: comma-separated
 * `keyId:base64key` entries of 32-byte keys; the first seals, every one opens (rotation: prepend).
 * Required by the roles that seal or open secrets (api, dispatcher, agent): there is no
 * plaintext fallback.
 */
import * as Env from "@svc/config/Env"
import { Config, Effect, Option, Redacted, Result, Schema, SchemaIssue } from "effect"
import * as crypto from "node:crypto"

export const ENCRYPTION_KEYS_VARIABLE = "SVC_ENCRYPTION_KEYS"

export const KEY_BYTES = 32
export const KEY_ID = /^[A-Za-z0-9_-]{1,64}$/
/** 32 bytes as base64 (padded) or base64url (unpadded): nothing else, so no byte is guessed. */
const KEY_BASE64 = /^(?:[A-Za-z0-9+/]{43}=|[A-Za-z0-9_-]{43})$/

export interface EncryptionKey {
  /** Written into every value it seals; letters, digits, `_` and `-`, at most 64. */
  readonly id: string
  readonly key: Uint8Array
}

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
  new Config.ConfigError(
    new Schema.SchemaError(new SchemaIssue.InvalidValue({ message: `${ENCRYPTION_KEYS_VARIABLE}: ${message}` }))
  )

const text = Config.option(Config.Redacted(ENCRYPTION_KEYS_VARIABLE)).pipe(
  Config.map((value) => (Option.isSome(value) ? Redacted.value(value.value).trim() : ""))
)

/** Whether `SVC_ENCRYPTION_KEYS` is set (`svc dev` generates keys of its own otherwise). */
export const EncryptionKeysSet = text.pipe(Config.map((value) => value !== ""))

/** `SVC_ENCRYPTION_KEYS`, required; unset or malformed is a ConfigError that never shows key material. */
export const EncryptionKeys: Env.Setting<ReadonlyArray<EncryptionKey>> = Env.describe(
  text.pipe(
    Config.mapEffect((value) => {
      if (value === "") {
        return Effect.fail(configError(
          "not set. The api, dispatcher and agent roles seal and open secrets with it: comma-separated " +
            "keyId:base64key entries of 32-byte keys (e.g. main:$(openssl rand -base64 32)); the first seals, all open. " +
            "`svc dev` generates one into .svc/encryption-keys."
        ))
      }
      return Result.match(parseEncryptionKeys(value), {
        onSuccess: (keys) => Effect.succeed(keys),
        onFailure: (message) => Effect.fail(configError(message))
      })
    })
  ),
  { name: ENCRYPTION_KEYS_VARIABLE, default: "required (svc dev: `.svc/encryption-keys`)", format: "keys" }
)

export const settings: ReadonlyArray<Env.AnySetting> = [EncryptionKeys]
