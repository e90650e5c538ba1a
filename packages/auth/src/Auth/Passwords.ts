/**
 * Password hashing with scrypt (memory-hard; node:crypto, run on libuv's thread pool so the
 * event loop keeps serving). Stored form: `scrypt$<log2 N>$<r>$<p>$<salt b64>$<hash b64>`, so
 * the cost can be raised later without invalidating stored hashes.
 */
import { Effect } from "effect"
import { randomBytes, scrypt, timingSafeEqual } from "node:crypto"

/** N = 2^15, r = 8: 32 MiB and some tens of milliseconds per hash. */
export const COST = { log2N: 15, r: 8, p: 1 } as const
const KEY_LENGTH = 32
const SALT_LENGTH = 16

const derive = (password: string, salt: Buffer, cost: { log2N: number; r: number; p: number }) =>
  Effect.callback<Buffer>((resume) => {
    const N = 2 ** cost.log2N
    scrypt(
      password.normalize("NFC"),
      salt,
      KEY_LENGTH,
      { N, r: cost.r, p: cost.p, maxmem: 256 * N * cost.r + 1024 * 1024 },
      (error, key) => resume(error ? Effect.die(error) : Effect.succeed(key))
    )
  })

/** A new salted hash of `password`. */
export const hash = Effect.fnUntraced(function*(password: string) {
  const salt = randomBytes(SALT_LENGTH)
  const key = yield* derive(password, salt, COST)
  return `scrypt$${COST.log2N}$${COST.r}$${COST.p}$${salt.toString("base64")}$${key.toString("base64")}`
})

const STORED = /^scrypt\$(\d{1,2})\$(\d{1,2})\$(\d{1,2})\$([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+)$/

/** Whether `password` matches `stored`; constant-time comparison of the derived keys. */
export const verify = Effect.fnUntraced(function*(password: string, stored: string) {
  const m = STORED.exec(stored)
  if (m === null) return false
  const cost = { log2N: Number(m[1]), r: Number(m[2]), p: Number(m[3]) }
  if (cost.log2N < 10 || cost.log2N > 20 || cost.r < 1 || cost.r > 32 || cost.p < 1 || cost.p > 16) return false
  const expected = Buffer.from(m[5]!, "base64")
  const key = yield* derive(password, Buffer.from(m[4]!, "base64"), cost)
  return key.length === expected.length && timingSafeEqual(key, expected)
})

/**
 * A hash no password matches, verified when the email is unknown so that a wrong email costs
 * the same time as a wrong password.
 */
export const DUMMY_HASH = `scrypt$${COST.log2N}$${COST.r}$${COST.p}$${Buffer.alloc(SALT_LENGTH).toString("base64")}$${
  Buffer.alloc(KEY_LENGTH).toString("base64")
}`
