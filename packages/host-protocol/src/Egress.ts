/**
 * What the hosts' egress proxies need to know about each sandbox and each bound secret
 * (docs/contract.md#snapshots-network-policy-and-exposed-ports, #secrets), declared once for the control plane, which
 * writes it, and the host agents, which read it.
 *
 * The `egress` KV bucket holds two kinds of entries:
 *
 *   sandbox.<sandboxId>  `SandboxEgress`: the sandbox's policy and the ids of its bound secrets
 *   secret.<secretId>    `EgressSecret`: where and how the proxy writes the secret, and its
 *                        value sealed with `SecretBox` (AAD `secretValueAad(id)`)
 *
 * The control plane writes an entry in the same transaction as the change that causes it
 * (through the outbox), so a committed policy change, binding or rotation always reaches the
 * hosts; a deleted sandbox or secret is a deleted entry. Agents watch the bucket and keep the
 * entries of their sandboxes in memory: a change applies to the next connection. A value is
 * opened only in the proxy's memory, when a request needs it.
 *
 * Rules: a CIDR (`203.0.113.0/24`, `2001:db8::/32`), an address, or a domain (`example.com`,
 * `*.example.com`: subdomains at any depth, not the name itself). Deny wins; an empty
 * `allow_out` allows every public address unless the operator's default is `deny`. Private,
 * loopback, link-local and the platform's own addresses are never reachable, whatever the rules.
 */
import type { BucketSpec } from "@svc/bus/Topology"
import { Effect, Result, Schema, SchemaIssue, SchemaTransformation } from "effect"
import * as net from "node:net"

export const EGRESS_BUCKET = "egress"
export const EGRESS_BUCKET_SPEC: BucketSpec = { name: EGRESS_BUCKET, history: 1 }

export const sandboxEgressKey = (sandboxId: string) => `sandbox.${sandboxId}`
export const secretEgressKey = (secretId: string) => `secret.${secretId}`
/** The AAD a secret's value is sealed with: a value copied to another secret does not open. */
export const secretValueAad = (secretId: string) => `secret:${secretId}`

/** At most this many rules in each of `allow_out` and `deny_out`. */
export const MAX_RULES = 100
const MAX_DOMAIN = 253
const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/

export type ParsedRule =
  | { readonly _tag: "Cidr"; readonly family: 4 | 6; readonly address: string; readonly prefix: number }
  | { readonly _tag: "Domain"; readonly name: string; readonly wildcard: boolean }

/** One rule's text as the API takes it; the error says what is wrong with it, for people. */
export const parseRule = (input: string): Result.Result<ParsedRule, string> => {
  const text = input.trim().toLowerCase()
  if (text === "") return Result.fail("a rule is empty")
  const slash = text.indexOf("/")
  const address = slash === -1 ? text : text.slice(0, slash)
  const family = net.isIP(address)
  if (family !== 0) {
    if (address.includes("%")) return Result.fail(`"${input}": zone ids are not allowed`)
    const max = family === 4 ? 32 : 128
    let prefix = max
    if (slash !== -1) {
      const p = text.slice(slash + 1)
      prefix = /^\d{1,3}$/.test(p) ? Number(p) : Number.NaN
      if (!(prefix >= 0 && prefix <= max)) return Result.fail(`"${input}": the prefix length must be 0 to ${max}`)
    }
    return Result.succeed({ _tag: "Cidr", family: family as 4 | 6, address, prefix })
  }
  if (slash !== -1) return Result.fail(`"${input}" is neither a CIDR nor a domain`)
  const wildcard = text.startsWith("*.")
  const name = (wildcard ? text.slice(2) : text).replace(/\.$/, "")
  if (name.length === 0 || name.length > MAX_DOMAIN) return Result.fail(`"${input}" is not a domain name`)
  const labels = name.split(".")
  if (labels.length < 2 && !wildcard) {
    // A single label (`localhost`, `metadata`) names nothing public.
    return Result.fail(`"${input}": a domain needs at least two labels`)
  }
  if (!labels.every((label) => LABEL.test(label))) {
    return Result.fail(`"${input}" is not a domain (letters, digits and hyphens; \`*.\` only in front)`)
  }
  return Result.succeed({ _tag: "Domain", name, wildcard })
}

/** A rule as stored and shown: trimmed, lowercase, checked. */
export const Rule = Schema.String.pipe(
  Schema.decodeTo(
    Schema.String,
    SchemaTransformation.transformEffect({
      decode: (input: string, options) =>
        Result.match(parseRule(input), {
          onSuccess: () => Effect.succeed(input.trim().toLowerCase()),
          onFailure: (message) => Effect.fail(new SchemaIssue.InvalidValue({ message }, input, options))
        }),
      encode: (rule: string) => Effect.succeed(rule)
    })
  )
)

export const Rules = Schema.Array(Rule).check(Schema.isMaxLength(MAX_RULES))

/** A sandbox's egress policy as the record shows it (`network: {allow_out, deny_out}`). */
export const NetworkPolicy = Schema.Struct({
  allow_out: Rules,
  deny_out: Rules
})
export type NetworkPolicy = typeof NetworkPolicy.Type

export const OPEN_POLICY: NetworkPolicy = { allow_out: [], deny_out: [] }

/** `sandbox.<sandboxId>`. */
export const SandboxEgress = Schema.Struct({
  sandboxId: Schema.String,
  orgId: Schema.String,
  policy: NetworkPolicy,
  /** Bound secrets, in binding order; an id with no `secret.<id>` entry (deleted) is skipped. */
  secretIds: Schema.Array(Schema.String)
})
export type SandboxEgress = typeof SandboxEgress.Type

/** `secret.<secretId>`. */
export const EgressSecret = Schema.Struct({
  secretId: Schema.String,
  orgId: Schema.String,
  /** Hosts (exact names, or `*.example.com`) whose requests get the header; nowhere else. */
  allowedHosts: Schema.Array(Schema.String),
  /** `Authorization` unless the secret says otherwise. */
  headerName: Schema.String,
  /** `Bearer {value}` unless the secret says otherwise; `{value}` is replaced by the value. */
  headerFormat: Schema.String,
  /** `SecretBox.seal(value, secretValueAad(secretId))`. */
  sealedValue: Schema.String
})
export type EgressSecret = typeof EgressSecret.Type

/** Whether a domain rule or an allowed host (`example.com`, `*.example.com`) covers `host`. */
export const domainMatches = (pattern: string, host: string): boolean => {
  const name = host.toLowerCase().replace(/\.$/, "")
  const p = pattern.toLowerCase()
  return p.startsWith("*.") ? name.endsWith(p.slice(1)) && name.length > p.length - 1 : name === p
}
