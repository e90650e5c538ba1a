/**
 * Password hashing with Argon2id (RFC 9106; node:crypto's own, no native add-on), run on libuv's
 * thread pool so the event loop keeps serving. Parameters are OWASP's current first choice:
 * m = 19 MiB, t = 2, p = 1 (measured here: about 30 ms per hash; libuv's 4 threads bound the
 * memory of concurrent hashes to 76 MiB).
 *
 * Stored form: the PHC string `$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>` (unpadded base64),
 * so the cost travels with each hash. Hashes of earlier releases,
 * `scrypt$<log2 N>$<r>$<p>$<salt b64>$<hash b64>` (N = 2^15), still verify; `needsRehash` says
 * when a stored hash is not at the current parameters, and sign-in then stores a new one.
 */
import { Effect } from "effect"
import { argon2, randomBytes, scrypt, timingSafeEqual } from "node:crypto"

/** The current parameters: memory in KiB, passes, lanes. */
export const ARGON2 = { memoryKiB: 19_456, passes: 2, parallelism: 1 } as const
const KEY_LENGTH = 32
const SALT_LENGTH = 16
const VERSION = 19

interface Argon2Cost {
  readonly memoryKiB: number
  readonly passes: number
  readonly parallelism: number
}

const argon2id = (password: string, salt: Buffer, cost: Argon2Cost, length: number) =>
  Effect.callback<Buffer>((resume) => {
    argon2("argon2id", {
      message: password.normalize("NFC"),
      nonce: salt,
      parallelism: cost.parallelism,
      tagLength: length,
      memory: cost.memoryKiB,
      passes: cost.passes
    }, (error, key) => resume(error ? Effect.die(error) : Effect.succeed(key)))
  })

const scryptKey = (password: string, salt: Buffer, cost: { log2N: number; r: number; p: number }, length: number) =>
  Effect.callback<Buffer>((resume) => {
    const N = 2 ** cost.log2N
    scrypt(
      password.normalize("NFC"),
      salt,
      length,
      { N, r: cost.r, p: cost.p, maxmem: 256 * N * cost.r + 1024 * 1024 },
      (error, key) => resume(error ? Effect.die(error) : Effect.succeed(key))
    )
  })

const b64 = (bytes: Buffer) => bytes.toString("base64").replace(/=+$/, "")

const phc = (cost: Argon2Cost, salt: Buffer, key: Buffer) =>
  `$argon2id$v=${VERSION}$m=${cost.memoryKiB},t=${cost.passes},p=${cost.parallelism}$${b64(salt)}$${b64(key)}`

/** A new salted hash of `password` at the current parameters. */
export const hash = Effect.fnUntraced(function*(password: string) {
  const salt = randomBytes(SALT_LENGTH)
  return phc(ARGON2, salt, yield* argon2id(password, salt, ARGON2, KEY_LENGTH))
})

const ARGON2_STORED =
  /^\$argon2id\$v=19\$m=(\d{1,7}),t=(\d{1,2}),p=(\d{1,2})\$([A-Za-z0-9+/]{11,})\$([A-Za-z0-9+/]{16,})$/
const SCRYPT_STORED = /^scrypt\$(\d{1,2})\$(\d{1,2})\$(\d{1,2})\$([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+)$/

type Parsed =
  | { readonly _tag: "Argon2id"; readonly cost: Argon2Cost; readonly salt: Buffer; readonly key: Buffer }
  | {
    readonly _tag: "Scrypt"
    readonly cost: { log2N: number; r: number; p: number }
    readonly salt: Buffer
    readonly key: Buffer
  }

/** A stored hash within the bounds this code accepts (a tampered row cannot ask for 4 GiB). */
const parse = (stored: string): Parsed | undefined => {
  const a = ARGON2_STORED.exec(stored)
  if (a !== null) {
    const cost = { memoryKiB: Number(a[1]), passes: Number(a[2]), parallelism: Number(a[3]) }
    if (cost.memoryKiB < 8 * cost.parallelism || cost.memoryKiB > 262_144 || cost.passes < 1 || cost.passes > 16) {
      return undefined
    }
    if (cost.parallelism < 1 || cost.parallelism > 16) return undefined
    const salt = Buffer.from(a[4]!, "base64")
    const key = Buffer.from(a[5]!, "base64")
    return salt.length >= 8 && key.length >= 16 ? { _tag: "Argon2id", cost, salt, key } : undefined
  }
  const s = SCRYPT_STORED.exec(stored)
  if (s !== null) {
    const cost = { log2N: Number(s[1]), r: Number(s[2]), p: Number(s[3]) }
    if (cost.log2N < 10 || cost.log2N > 20 || cost.r < 1 || cost.r > 32 || cost.p < 1 || cost.p > 16) return undefined
    const key = Buffer.from(s[5]!, "base64")
    return key.length >= 16 ? { _tag: "Scrypt", cost, salt: Buffer.from(s[4]!, "base64"), key } : undefined
  }
  return undefined
}

/** Whether `password` matches `stored`; constant-time comparison of the derived keys. */
export const verify = Effect.fnUntraced(function*(password: string, stored: string) {
  const parsed = parse(stored)
  if (parsed === undefined) return false
  const key = parsed._tag === "Argon2id"
    ? yield* argon2id(password, parsed.salt, parsed.cost, parsed.key.length)
    : yield* scryptKey(password, parsed.salt, parsed.cost, parsed.key.length)
  return timingSafeEqual(key, parsed.key)
})

/** Whether a stored hash is not Argon2id at the current parameters (sign-in then rewrites it). */
export const needsRehash = (stored: string): boolean => {
  const parsed = parse(stored)
  return parsed === undefined || parsed._tag !== "Argon2id" || parsed.cost.memoryKiB !== ARGON2.memoryKiB ||
    parsed.cost.passes !== ARGON2.passes || parsed.cost.parallelism !== ARGON2.parallelism
}

/**
 * A hash no password matches (its key is zeros), verified when the email is unknown so that a
 * wrong email costs the same time as a wrong password.
 */
export const DUMMY_HASH = phc(ARGON2, Buffer.alloc(SALT_LENGTH), Buffer.alloc(KEY_LENGTH))
