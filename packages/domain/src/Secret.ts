/**
 * Org secrets (docs/contract.md#secrets): the metadata record the API shows, and the rules of
 * the create, rotate and update bodies. A value is never part of a record, a list, an error or
 * an issue message: the checks of `SecretValue` say what is wrong without quoting it.
 *
 * Rules (decisions of docs/contract.md#secrets):
 * - `name`: 1 to 120 characters, unique among the org's secrets (409 `conflict`).
 * - `value`: 1 byte to 64 KiB of UTF-8, no control character but tab (it becomes part of an
 *   HTTP header line, where CR or LF would split it).
 * - `allowed_hosts`: 1 to 100 entries, each `host` or `*.domain` (HTTPS on port 443), `host:port`
 *   (HTTPS on that port) or `http://host[:port]` (plain HTTP, port 80 by default: the value then
 *   crosses the network in clear, so only where the entry says so). A host is a domain name
 *   (at least two labels: `*.com` would send the value to every .com host), a wildcard
 *   (subdomains at any depth, not the name itself) or a public IP address (`[v6]` with a
 *   port).
 *   Stored lowercased, the default port and `https://` left out, duplicates removed.
 * - `header_name`: an HTTP token (RFC 9110) of at most 128 characters, not a header the proxy
 *   owns (hop-by-hop ones, `Host`, `Content-Length`); default `Authorization`.
 * - `header_format`: at most 1 KiB, contains `{value}` (each occurrence becomes the value), no
 *   control character but tab; default `Bearer {value}`.
 */
import { Effect, Result, Schema, SchemaIssue, SchemaTransformation } from "effect"
import * as net from "node:net"
import { classifyAddress } from "./Address.ts"
import { SecretId } from "./Ids.ts"
import { domainMatches, MAX_RULE_LENGTH, parseRule } from "./Network.ts"
import { Page } from "./Pagination.ts"
import { Bounded, enforcedMax, MAX_RECORD_NAME, Name } from "./Text.ts"
import { NullableTimestamp, Timestamp } from "./Time.ts"

export const MAX_SECRET_VALUE_BYTES = 64 * 1024
export const MAX_ALLOWED_HOSTS = 100
export const MAX_HEADER_NAME = 128
export const MAX_HEADER_FORMAT = 1024
export const DEFAULT_HEADER_NAME = "Authorization"
export const DEFAULT_HEADER_FORMAT = "Bearer {value}"
export const VALUE_PLACEHOLDER = "{value}"

/** A secret as the API shows it: never its value. */
export const Secret = Schema.Struct({
  id: SecretId,
  name: Bounded(MAX_RECORD_NAME),
  allowed_hosts: Schema.Array(Bounded(MAX_RULE_LENGTH)).check(Schema.isMaxLength(MAX_ALLOWED_HOSTS)),
  header_name: Bounded(MAX_HEADER_NAME),
  header_format: Bounded(MAX_HEADER_FORMAT),
  createdAt: Timestamp,
  /** When the value was last replaced; null until then. */
  rotatedAt: NullableTimestamp
})
export type Secret = typeof Secret.Type

export const SecretList = Page("secrets", Secret)
export type SecretList = typeof SecretList.Type

/** Whether `s` holds a control character other than tab: it would break or split a header line. */
const hasControl = (s: string): boolean => {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if ((c < 0x20 && c !== 0x09) || c === 0x7f) return true
  }
  return false
}

/** The value: checked without ever being quoted in an issue. */
export const SecretValue = Schema.String.check(
  // UTF-16 units never outnumber UTF-8 bytes: the byte bound below enforces it.
  enforcedMax(MAX_SECRET_VALUE_BYTES),
  Schema.makeFilter((v: string) => {
    if (v.length === 0) return "must not be empty"
    if (Buffer.byteLength(v, "utf8") > MAX_SECRET_VALUE_BYTES) return `at most ${MAX_SECRET_VALUE_BYTES} bytes`
    if (/[\r\n]/.test(v)) return "must not contain CR or LF (it is sent in a header)"
    if (hasControl(v)) return "must not contain control characters other than tab"
    return true
  }, { expected: "the secret value (1 byte to 64 KiB, one header line)" })
)

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/
/** Headers the proxy (or HTTP itself) owns: a secret cannot be written into them. */
export const RESERVED_HEADERS: ReadonlySet<string> = new Set([
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "host",
  "content-length"
])

export const HeaderName = Schema.String.check(
  enforcedMax(MAX_HEADER_NAME),
  Schema.makeFilter((h: string) => {
    if (h.length === 0 || h.length > MAX_HEADER_NAME) return `1 to ${MAX_HEADER_NAME} characters`
    if (!TOKEN.test(h)) return "an HTTP header name (letters, digits and !#$%&'*+.^_`|~-)"
    if (RESERVED_HEADERS.has(h.toLowerCase())) return `${h} is a header the proxy owns`
    return true
  }, { expected: "an HTTP header name" })
)

export const HeaderFormat = Schema.String.check(
  enforcedMax(MAX_HEADER_FORMAT),
  Schema.makeFilter((f: string) => {
    if (f.length > MAX_HEADER_FORMAT) return `at most ${MAX_HEADER_FORMAT} characters`
    if (!f.includes(VALUE_PLACEHOLDER)) return `must contain ${VALUE_PLACEHOLDER}`
    if (hasControl(f)) return "must not contain control characters other than tab"
    return true
  }, { expected: `a header value containing ${VALUE_PLACEHOLDER}` })
)

/** Where a secret may be written: one `allowed_hosts` entry, parsed. */
export interface SecretDestination {
  readonly scheme: "https" | "http"
  /** A domain name, `*.domain`, or an IP address (IPv6 without brackets). */
  readonly host: string
  readonly port: number
}

const DEFAULT_PORTS = { https: 443, http: 80 } as const
const FORMS = "an allowed host is `host`, `*.domain`, `host:port` or `http://host[:port]`"

/** Pure: one entry as the API takes it, or why it is not one. */
export const parseSecretDestination = (input: string): Result.Result<SecretDestination, string> => {
  let text = input.trim().toLowerCase()
  let scheme: SecretDestination["scheme"] = "https"
  const withScheme = /^([a-z]+):\/\//.exec(text)
  if (withScheme !== null) {
    if (withScheme[1] !== "http" && withScheme[1] !== "https") return Result.fail(`"${input}": ${FORMS}`)
    scheme = withScheme[1]
    text = text.slice(withScheme[0].length).replace(/\/$/, "")
  }
  let host = text
  let port: number = DEFAULT_PORTS[scheme]
  const bracketed = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(text)
  if (bracketed !== null) {
    if (!net.isIPv6(bracketed[1]!)) return Result.fail(`"${input}": ${FORMS}`)
    host = bracketed[1]!
    if (bracketed[2] !== undefined) port = Number(bracketed[2])
  } else if (!net.isIPv6(text)) {
    const withPort = /^([^:]+):(\d{1,5})$/.exec(text)
    if (withPort !== null) {
      host = withPort[1]!
      port = Number(withPort[2])
    }
  }
  if (!(port >= 1 && port <= 65_535)) return Result.fail(`"${input}": the port must be 1 to 65535`)
  if (host.includes("%")) return Result.fail(`"${input}": zone ids are not allowed`)
  if (net.isIP(host) !== 0) {
    // A secret goes to public addresses only (the proxy reaches no other for a sandbox anyway).
    const verdict = classifyAddress(host)
    return verdict._tag === "NonPublic"
      ? Result.fail(`"${input}": ${host} is not a public address (${verdict.range})`)
      : Result.succeed({ scheme, host, port })
  }
  if (/[/:@?#[\]]/.test(host)) return Result.fail(`"${input}": ${FORMS}`)
  const parsed = parseRule(host)
  if (Result.isFailure(parsed)) return Result.fail(parsed.failure)
  const rule = parsed.success
  if (rule._tag !== "Domain") return Result.fail(`"${input}": ${FORMS}`)
  if (rule.name.split(".").length < 2) {
    return Result.fail(`"${input}": a wildcard needs at least two labels after it (*.example.com)`)
  }
  return Result.succeed({ scheme, host: rule.wildcard ? `*.${rule.name}` : rule.name, port })
}

/** The stored form of an entry: lowercase, `https://` and the scheme's default port left out. */
export const formatSecretDestination = (d: SecretDestination): string => {
  const host = net.isIPv6(d.host) ? `[${d.host}]` : d.host
  const port = d.port === DEFAULT_PORTS[d.scheme] ? "" : `:${d.port}`
  return `${d.scheme === "http" ? "http://" : ""}${host}${port}`
}

/** Why `input` is not an allowed host, or its stored form. */
export const parseAllowedHost = (input: string): Result.Result<string, string> =>
  Result.map(parseSecretDestination(input), formatSecretDestination)

/**
 * Whether a request goes where an entry allows: the same scheme (HTTPS unless the entry says
 * `http://`), the same port, and the host (a name its pattern covers, or the same address).
 */
export const secretDestinationMatches = (
  entry: SecretDestination,
  request: { readonly scheme: "https" | "http"; readonly host: string; readonly port: number }
): boolean => {
  if (entry.scheme !== request.scheme || entry.port !== request.port) return false
  const family = net.isIP(entry.host)
  if (family !== 0) {
    return net.isIP(request.host) === family &&
      new net.SocketAddress({ address: entry.host, family: family === 4 ? "ipv4" : "ipv6" }).address ===
        new net.SocketAddress({ address: request.host, family: family === 4 ? "ipv4" : "ipv6" }).address
  }
  return net.isIP(request.host) === 0 && domainMatches(entry.host, request.host)
}

const AllowedHost = Schema.String.check(Schema.isMaxLength(MAX_RULE_LENGTH)).pipe(
  Schema.decodeTo(
    Schema.String,
    SchemaTransformation.transformEffect({
      decode: (input: string, options) =>
        Result.match(parseAllowedHost(input), {
          onSuccess: (host) => Effect.succeed(host),
          onFailure: (message) => Effect.fail(new SchemaIssue.InvalidValue({ message }, input, options))
        }),
      encode: (host: string) => Effect.succeed(host)
    })
  )
)

/** 1 to 100 hosts, duplicates (after normalising) removed, order kept. */
export const AllowedHosts = Schema.Array(AllowedHost).check(
  enforcedMax(MAX_ALLOWED_HOSTS),
  Schema.makeFilter((hosts: ReadonlyArray<string>) =>
    hosts.length === 0
      ? "at least one host"
      : hosts.length > MAX_ALLOWED_HOSTS
      ? `at most ${MAX_ALLOWED_HOSTS} hosts`
      : true
  )
).pipe(
  Schema.decodeTo(
    Schema.Array(Schema.String),
    SchemaTransformation.transform({
      decode: (hosts: ReadonlyArray<string>): ReadonlyArray<string> => [...new Set(hosts)],
      encode: (hosts: ReadonlyArray<string>) => hosts
    })
  )
)

/** Body of POST /v1/secrets. */
export const CreateSecretRequest = Schema.Struct({
  name: Name(120),
  value: SecretValue,
  allowed_hosts: AllowedHosts,
  header_name: HeaderName.pipe(Schema.withDecodingDefaultKey(Effect.succeed(DEFAULT_HEADER_NAME))),
  header_format: HeaderFormat.pipe(Schema.withDecodingDefaultKey(Effect.succeed(DEFAULT_HEADER_FORMAT)))
})
export type CreateSecretRequest = typeof CreateSecretRequest.Type

/** Body of PUT /v1/secrets/{id}/value. */
export const RotateSecretRequest = Schema.Struct({ value: SecretValue })
export type RotateSecretRequest = typeof RotateSecretRequest.Type

/** Body of PATCH /v1/secrets/{id}: the fields present change. */
export const PatchSecretRequest = Schema.Struct({
  allowed_hosts: Schema.optionalKey(AllowedHosts),
  header_name: Schema.optionalKey(HeaderName),
  header_format: Schema.optionalKey(HeaderFormat)
})
export type PatchSecretRequest = typeof PatchSecretRequest.Type

/**
 * Whether a patch changes where or under which header the value goes: `allowed_hosts` or
 * `header_name` (docs/contract.md#secrets-scopes: such an edit needs `secrets:use` besides `secrets:write`).
 */
export const patchNeedsUse = (patch: PatchSecretRequest): boolean =>
  patch.allowed_hosts !== undefined || patch.header_name !== undefined
