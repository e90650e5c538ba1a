/**
 * API key secret tokens (docs/contract.md#api-keys).
 *
 * `svc_live_` + a 38-character base62 body: 32 random characters (32 * log2(62) = 190.5 bits)
 * followed by a 6-character checksum, the CRC32 of those 32 characters in base62, left-padded
 * with `0`. A scanner (or the server, before any database lookup) can tell a real token from
 * noise; CRC32 catches every single changed character. The database stores only the SHA-256
 * of the whole token; `prefix` (`svc_live_` + 8 body characters) tells keys apart in lists.
 */
import { Result, Schema } from "effect"
import { hash as digest, randomBytes, timingSafeEqual } from "node:crypto"
import { crc32 } from "node:zlib"

export const TOKEN_PREFIX = "svc_live_"
const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
export const RANDOM_LENGTH = 32
export const CHECKSUM_LENGTH = 6
export const BODY_LENGTH = RANDOM_LENGTH + CHECKSUM_LENGTH
export const TOKEN_LENGTH = TOKEN_PREFIX.length + BODY_LENGTH
/** `svc_live_` + this many body characters is the key's public `prefix`. */
export const PREFIX_BODY_CHARS = 8

const BASE62_BODY = /^[0-9A-Za-z]+$/

/** The checksum of a 32-character random part: CRC32 in base62, fixed width 6. */
export const checksum = (random: string): string => {
  let n = crc32(random)
  let out = ""
  for (let i = 0; i < CHECKSUM_LENGTH; i++) {
    out = BASE62[n % 62] + out
    n = Math.floor(n / 62)
  }
  return out
}

/** Uniform base62 characters by rejection sampling (bytes >= 248 would bias the alphabet). */
const randomBase62 = (length: number): string => {
  let out = ""
  while (out.length < length) {
    for (const b of randomBytes(length * 2)) {
      if (b < 248) out += BASE62[b % 62]
      if (out.length === length) break
    }
  }
  return out
}

/** A well-formed token (prefix, length, charset and checksum checked). */
export type ApiKeyToken = string & { readonly ApiKeyToken: unique symbol }

export type MalformedReason =
  | "empty"
  | "wrong_prefix"
  | "wrong_length"
  | "bad_charset"
  | "bad_checksum"

/** Checks a token's form and checksum without any database. */
export const parse = (input: string): Result.Result<ApiKeyToken, MalformedReason> => {
  if (input.length === 0) return Result.fail("empty")
  if (!input.startsWith(TOKEN_PREFIX)) return Result.fail("wrong_prefix")
  if (input.length !== TOKEN_LENGTH) return Result.fail("wrong_length")
  const body = input.slice(TOKEN_PREFIX.length)
  if (!BASE62_BODY.test(body)) return Result.fail("bad_charset")
  const random = body.slice(0, RANDOM_LENGTH)
  if (checksum(random) !== body.slice(RANDOM_LENGTH)) return Result.fail("bad_checksum")
  return Result.succeed(input as ApiKeyToken)
}

export const isWellFormed = (input: string): input is ApiKeyToken => Result.isSuccess(parse(input))

/** Schema of a well-formed token, e.g. for decoding a bearer credential. */
export const ApiKeyTokenSchema = Schema.String.check(
  Schema.makeFilter((s: string) => isWellFormed(s) || "a well-formed svc_live_ API key", {
    expected: "a well-formed svc_live_ API key"
  })
).pipe(Schema.brand("ApiKeyToken"))

/** Hex SHA-256 of the whole token: the only form stored. */
// One-shot `crypto.hash` (same digest): every authenticated request hashes its key to find it in the
// cache, and a `createHash` object costs about twice as much (bench/api.ts).
export const hash = (token: string): string => digest("sha256", token, "hex")

/** The public prefix of a token: `svc_live_` + the first 8 body characters. */
export const prefixOf = (token: ApiKeyToken): string => token.slice(0, TOKEN_PREFIX.length + PREFIX_BODY_CHARS)

export interface MintedToken {
  /** The secret, shown once. */
  readonly token: ApiKeyToken
  readonly prefix: string
  /** Hex SHA-256 of `token`. */
  readonly hash: string
}

/** A fresh token with its public prefix and its hash. */
export const mint = (): MintedToken => {
  const random = randomBase62(RANDOM_LENGTH)
  const token = `${TOKEN_PREFIX}${random}${checksum(random)}` as ApiKeyToken
  return { token, prefix: prefixOf(token), hash: hash(token) }
}

/** Compares two hashes in constant time (for a given length); unequal lengths are unequal. */
export const hashesEqual = (a: string, b: string): boolean => {
  const x = Buffer.from(a, "utf8")
  const y = Buffer.from(b, "utf8")
  return x.length === y.length && timingSafeEqual(x, y)
}
