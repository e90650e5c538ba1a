/**
 * A sandbox's egress policy (docs/contract.md#snapshots-network-policy-and-exposed-ports): its
 * rules' grammar, checked by the API and matched by the hosts' egress proxies.
 *
 * Rules: a CIDR (`203.0.113.0/24`, `2001:db8::/32`), an address, or a domain (`example.com`,
 * `*.example.com`: subdomains at any depth, not the name itself). Deny wins; an empty
 * `allow_out` allows every public address unless the operator's default is `deny`. Private,
 * loopback, link-local and the platform's own addresses are never reachable, whatever the rules.
 */
import { Effect, Result, Schema, SchemaIssue, SchemaTransformation } from "effect"
import * as net from "node:net"

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
/** The longest rule: `*.` and a domain name of 253 characters and its final dot (a CIDR is shorter). */
export const MAX_RULE_LENGTH = 256

export const Rule = Schema.String.check(Schema.isMaxLength(MAX_RULE_LENGTH)).pipe(
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

/** Whether a domain rule or an allowed host (`example.com`, `*.example.com`) covers `host`. */
export const domainMatches = (pattern: string, host: string): boolean => {
  const name = host.toLowerCase().replace(/\.$/, "")
  const p = pattern.toLowerCase()
  return p.startsWith("*.") ? name.endsWith(p.slice(1)) && name.length > p.length - 1 : name === p
}
