/** Reusable string and map rules for request bodies. */
import { Schema, SchemaTransformation } from "effect"

/**
 * The bound the other checks of a schema already enforce, stated for the OpenAPI document
 * (`maxLength`, or `maxItems` on an array) without a second issue for the same fault.
 */
export const enforcedMax = (max: number) =>
  Schema.makeFilter(() => true, {
    toJsonSchema: ({ type }) =>
      type === "string" ? [{ maxLength: max }, true] : type === "array" ? { maxItems: max } : [{}, true]
  })

/**
 * A string of at most `max` UTF-16 units: `maxLength` in the OpenAPI document, refused by
 * decoding past it (the OWASP ruleset wants a bound on every string, `.spectral.yaml`).
 */
export const Bounded = (max: number) => Schema.String.check(Schema.isMaxLength(max))

/**
 * Text the server writes itself (messages, reasons): decoding refuses more than `max` UTF-16
 * units, encoding cuts it to `max`, so an answer never carries more than the document says and
 * an over-long message is never a failure of its own.
 */
export const Truncated = (max: number) =>
  Bounded(max).pipe(
    Schema.decodeTo(
      Schema.String,
      SchemaTransformation.transform({
        decode: (s: string) => s,
        encode: (s: string) => (s.length > max ? s.slice(0, max) : s)
      })
    )
  )

/**
 * Names as records show them: a `Name(120)` is at most 240 UTF-16 units; names the platform
 * makes (an app's replicas) add a suffix.
 */
export const MAX_RECORD_NAME = 512

/** Failure messages of records (a build's, a sandbox's), cut there. */
export const MAX_ERROR_TEXT = 4096

/** Ids in paths and records (ours are at most 31 characters; a template's may be its name). */
export const MAX_ID_LENGTH = 128
export const IdText = Bounded(MAX_ID_LENGTH)

/** A timestamp as the server writes it (`2026-11-22T01:02:03.456Z`; 35 fits any ISO 8601 form). */
export const TimestampText = Bounded(35)

/** Unicode code points, not UTF-16 units: "1 to 120 characters" means what people see. */
export const codePoints = (s: string): number => {
  let n = 0
  for (const _ of s) n++
  return n
}

/** Printable text: no control characters (C0, DEL, C1), no lone surrogates. */
const PRINTABLE = /^[^\p{Cc}\p{Cs}]*$/u

/** A name: 1 to `max` characters, printable, not blank. */
export const Name = (max = 120) =>
  Schema.String.check(
    Schema.makeFilter((s: string) => {
      const n = codePoints(s)
      if (n < 1 || n > max) return `between 1 and ${max} characters`
      if (!PRINTABLE.test(s)) return "printable characters only"
      if (s.trim().length === 0) return "not blank"
      return true
    }, {
      expected: `a name of 1 to ${max} printable characters`,
      // JSON Schema counts characters (code points) as this check does.
      toJsonSchema: ({ type }) => type === "string" ? [{ maxLength: max }, true] : [{}, true]
    })
  )

/** Byte length of a value's JSON serialization. */
export const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value), "utf8")

/**
 * Text stored in Postgres cannot hold NUL (it refuses the value; a request must never get that
 * far): a string check for every free-text field, with the message of its `invalid_request`.
 */
export const NO_NUL = "no NUL characters"
export const withoutNul = Schema.makeFilter((s: string) => !s.includes("\u0000") || NO_NUL, {
  expected: "text without NUL"
})

/**
 * How deeply a JSON request body may nest objects and arrays (the outermost counts as 1).
 * Deeper bodies are refused before they are parsed into objects: recursive code (schema
 * decoding, `JSON.stringify`, Postgres' jsonb) never sees them, and 5,000 levels of metadata
 * cannot overflow a stack.
 */
export const MAX_JSON_DEPTH = 32

/**
 * Whether JSON text nests deeper than `max` (a linear scan of the text that skips strings; it
 * does not validate the JSON, parsing still does).
 */
export const jsonNestsDeeperThan = (text: string, max: number = MAX_JSON_DEPTH): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // backslash: skip the escaped character
      else if (c === 0x22) inString = false
    } else if (c === 0x22) inString = true
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true
    } else if (c === 0x7d || c === 0x5d) depth--
  }
  return false
}

export const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/
export const MAX_ENV_VARS = 128
export const MAX_ENV_KEY_LENGTH = 256
export const MAX_ENV_VALUE_BYTES = 32 * 1024
export const MAX_ENV_TOTAL_BYTES = 256 * 1024

/**
 * Environment variables: at most 128, keys `^[A-Za-z_][A-Za-z0-9_]*$` (at most 256), values
 * without NUL (they become C strings) of at most 32 KiB, 256 KiB in all.
 */
export const EnvVars = Schema.Record(
  Schema.String.check(Schema.isMaxLength(MAX_ENV_KEY_LENGTH)),
  // UTF-16 units never outnumber UTF-8 bytes: the byte bound below is the tighter one.
  Schema.String.check(Schema.isMaxLength(MAX_ENV_VALUE_BYTES))
).check(
  Schema.makeFilter((env: Readonly<Record<string, string>>) => {
    const keys = Object.keys(env)
    if (keys.length > MAX_ENV_VARS) return `at most ${MAX_ENV_VARS} variables`
    const issues: Array<Schema.FilterIssue> = []
    let total = 0
    for (const k of keys) {
      const v = env[k]!
      if (!ENV_KEY.test(k) || k.length > MAX_ENV_KEY_LENGTH) {
        issues.push({ path: [k], issue: "variable names match ^[A-Za-z_][A-Za-z0-9_]*$ (at most 256 characters)" })
      }
      const bytes = Buffer.byteLength(v, "utf8")
      total += bytes + k.length
      if (v.includes("\u0000")) issues.push({ path: [k], issue: "values cannot contain NUL" })
      else if (bytes > MAX_ENV_VALUE_BYTES) issues.push({ path: [k], issue: "at most 32 KiB per value" })
    }
    if (issues.length > 0) return issues
    return total <= MAX_ENV_TOTAL_BYTES || "at most 256 KiB of variables in all"
  }, { expected: "environment variables" })
)
export type EnvVars = typeof EnvVars.Type

/** An absolute path inside a sandbox: starts with `/`, no `..` segment, no NUL, at most 4096 bytes. */
export const AbsolutePath = Schema.String.check(
  // UTF-16 units never outnumber UTF-8 bytes: the byte bound below enforces it.
  enforcedMax(4096),
  Schema.makeFilter((p: string) => {
    if (!p.startsWith("/")) return "an absolute path (starting with /)"
    if (p.includes("\u0000")) return "no NUL characters"
    if (Buffer.byteLength(p, "utf8") > 4096) return "at most 4096 bytes"
    if (p.split("/").includes("..")) return "no .. segments"
    return true
  }, { expected: "an absolute path" })
)

/** A relative path (empty allowed): no leading `/`, no `..` segment, no NUL. */
export const RelativePath = Schema.String.check(
  enforcedMax(4096),
  Schema.makeFilter((p: string) => {
    if (p.startsWith("/")) return "a relative path (no leading /)"
    if (p.includes("\u0000")) return "no NUL characters"
    if (Buffer.byteLength(p, "utf8") > 4096) return "at most 4096 bytes"
    if (p.split("/").includes("..")) return "no .. segments"
    return true
  }, { expected: "a relative path" })
)
