/**
 * Logs as JSON lines (`SVC_LOG_FORMAT=json`): one object per line on stdout with `ts`, `level`,
 * `service`, `message`, the trace and span ids of the span the line was written in
 * (`trace_id`, `span_id`), the fiber's log annotations (`requestId` on every line of an API
 * request) and `cause` when there is one.
 *
 * Never a secret: the code logs none, and this logger also scrubs what would give one away if a
 * mistake let it through: a field named like a credential (`authorization`, `cookie`, `token`,
 * `secret`, `password`, `api_key`, ...) is written `<redacted>`, and a string that holds an API
 * key (`svc_live_...`), a preview token (`svc_pv_...`), a webhook signing secret (`whsec_...`) or
 * a bearer credential has that part replaced by `<redacted>`.
 */
import { Cause, Context, Layer, Logger, References, Tracer } from "effect"

/**
 * Whether the API writes one line per request (`request` with method, route, status and
 * duration): on with JSON logs, where a collector indexes them; off for the terminal's text.
 */
export const AccessLog = Context.Reference<boolean>("@svc/telemetry/AccessLog", { defaultValue: () => false })

const SECRET_FIELD =
  /^(authorization|proxy-authorization|cookie|set-cookie|x-svc-preview-token|password|passwd|secret|secrets?_?value|client_secret|token|access_token|refresh_token|session_token|api_?key|apikey|private_?key)$/i

const SECRET_TEXT = /(svc_live_|svc_pv_|whsec_)[A-Za-z0-9_\-.=+/]*|\b(Bearer|Basic)\s+[A-Za-z0-9_\-.=+/~]+/g

/** A string with every credential-looking part replaced. */
export const scrub = (text: string): string =>
  text.replace(
    SECRET_TEXT,
    (_match, prefix: string | undefined, scheme: string | undefined) =>
      prefix !== undefined ? `${prefix}<redacted>` : `${scheme} <redacted>`
  )

const MAX_DEPTH = 8

/** A JSON-safe copy of `value` with credential fields and credential text redacted. */
export const redact = (value: unknown, depth = 0): unknown => {
  if (typeof value === "string") return scrub(value)
  if (value === null || typeof value !== "object") {
    return typeof value === "bigint" ? value.toString() : typeof value === "function" ? undefined : value
  }
  if (depth >= MAX_DEPTH) return "[deep]"
  if (value instanceof Date) return value.toISOString()
  if (value instanceof Error) return scrub(`${value.name}: ${value.message}`)
  if (Array.isArray(value)) return value.map((item) => redact(item, depth + 1))
  if (Cause.isCause(value)) return scrub(Cause.pretty(value))
  const out: Record<string, unknown> = {}
  for (const [key, field] of Object.entries(value)) {
    out[key] = SECRET_FIELD.test(key) ? "<redacted>" : redact(field, depth + 1)
  }
  return out
}

const RESERVED = new Set(["ts", "level", "service", "message", "trace_id", "span_id", "cause"])

/** The JSON line of one log call. */
export const formatJsonLine = (service: string) =>
  Logger.make<unknown, string>(({ cause, date, fiber, logLevel, message }) => {
    const line: Record<string, unknown> = {
      ts: date.toISOString(),
      level: logLevel.toUpperCase(),
      service
    }
    const parts = Array.isArray(message) ? message : [message]
    line["message"] = redact(parts.length === 1 ? parts[0] : parts)
    const span = Context.getOrUndefined(fiber.context, Tracer.ParentSpan)
    if (span !== undefined) {
      line["trace_id"] = span.traceId
      line["span_id"] = span.spanId
    }
    for (const [key, value] of Object.entries(fiber.getRef(References.CurrentLogAnnotations))) {
      if (!RESERVED.has(key)) line[key] = SECRET_FIELD.test(key) ? "<redacted>" : redact(value)
    }
    if (cause.reasons.length > 0) line["cause"] = scrub(Cause.pretty(cause))
    try {
      return JSON.stringify(line)
    } catch {
      return JSON.stringify({ ts: line["ts"], level: line["level"], service, message: "unserialisable log line" })
    }
  })

/** The JSON-lines logger of a service, in place of the default one. */
export const jsonLayer = (service: string) =>
  Layer.merge(Logger.layer([Logger.withConsoleLog(formatJsonLine(service))]), Layer.succeed(AccessLog, true))
