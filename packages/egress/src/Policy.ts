/**
 * The egress decision, pure: may this sandbox reach this address (under this name)?
 *
 * In order: an address that is not public (private, loopback, link-local and metadata, CGNAT,
 * reserved, IPv4 and IPv6: @svc/domain/Address) is refused unless the operator allowed its
 * subnet, and the platform's own addresses (the sandboxes' subnet, this host's interfaces) are
 * refused even then; a matching `deny_out` rule refuses; a non-empty `allow_out` must match;
 * an empty one follows the operator's default. Domain rules match the name the connection
 * carried (HTTP Host, TLS SNI); CIDR rules match the address the proxy resolved and connects to.
 *
 * A `deny_out` domain rule also matches, on a connection without a domain name, an address the
 * platform's resolvers gave for a name it covers (`Destination.namesOf`), so an IP literal found
 * through DNS does not pass it; and a
 * connection that names no host at all (HTTP/1.0 without Host, TLS without SNI, raw TCP) is
 * refused when the policy has domain rules, unless an `allow_out` address rule allows it: the
 * domain rules could not be checked, and they are what the sandbox's owner asked for.
 */
import { allowedRules, classifyAddress, type FamilyRules, inSubnet, type Subnet } from "@svc/domain/Address"
import { domainMatches, type NetworkPolicy, type ParsedRule, parseRule } from "@svc/domain/Network"
import { Result } from "effect"
import * as net from "node:net"
import type { DefaultAction } from "./Config.ts"

export type Verdict =
  | { readonly _tag: "Allow" }
  | { readonly _tag: "Deny"; readonly reason: string }

const ALLOW: Verdict = { _tag: "Allow" }
const deny = (reason: string): Verdict => ({ _tag: "Deny", reason })

/** What the operator decided for every sandbox of the host. */
export interface AddressRules {
  readonly allowed: FamilyRules
  /** Never reachable, whatever is allowed: the sandboxes' subnet, the host's own addresses. */
  readonly platform: ReadonlyArray<Subnet>
}

export const addressRules = (allowedSubnets: ReadonlyArray<Subnet>, platform: ReadonlyArray<Subnet>): AddressRules => ({
  allowed: allowedRules(allowedSubnets),
  platform
})

/** Whether a sandbox may reach this address at all (before its own policy). */
export const checkAddress = (address: string, rules: AddressRules): Verdict => {
  if (rules.platform.some((subnet) => inSubnet(address, subnet))) {
    return deny(`${address} is an address of the platform`)
  }
  const verdict = classifyAddress(address, rules.allowed)
  return verdict._tag === "NonPublic" ? deny(`${address} is not a public address (${verdict.range})`) : ALLOW
}

/** What the proxy knows of one destination besides the policy. */
export interface Destination {
  /** The domain name the connection carried (Host, SNI); undefined for none or an IP literal. */
  readonly name: string | undefined
  /** The address the proxy would connect to. */
  readonly address: string
  /** Whether the connection named a host at all (a domain name or an IP literal). */
  readonly named: boolean
  /** Names the platform's resolvers answered with this address (recently). */
  readonly namesOf: (address: string) => ReadonlyArray<string>
}

const domainRuleMatches = (rule: Extract<ParsedRule, { _tag: "Domain" }>, name: string) =>
  domainMatches(rule.wildcard ? `*.${rule.name}` : rule.name, name)

const ruleMatches = (rule: ParsedRule, name: string | undefined, address: string): boolean => {
  if (rule._tag === "Domain") return name !== undefined && domainRuleMatches(rule, name)
  const family = net.isIP(address)
  if (family !== rule.family) return false
  return inSubnet(address, {
    address: rule.address,
    prefix: rule.prefix,
    family: rule.family === 4 ? "ipv4" : "ipv6"
  })
}

const parsed = (rules: ReadonlyArray<string>) =>
  rules.flatMap((text) => Result.match(parseRule(text), { onSuccess: (rule) => [{ text, rule }], onFailure: () => [] }))

/** A destination named by its address alone: no resolver memory (tests, callers without one). */
export const byAddress = (name: string | undefined, address: string): Destination => ({
  name,
  address,
  named: name !== undefined,
  namesOf: () => []
})

/** The sandbox's own policy over one destination (the address already passed `checkAddress`). */
export const checkPolicy = (
  policy: NetworkPolicy,
  defaultAction: DefaultAction,
  destination: Destination
): Verdict => {
  const { address, name } = destination
  const deny_out = parsed(policy.deny_out)
  const allow_out = parsed(policy.allow_out)
  for (const { rule, text } of deny_out) {
    if (ruleMatches(rule, name, address)) return deny(`deny_out rule "${text}"`)
    // By address only where no name was given: a name is matched as it is, so that another
    // name on a shared address (a CDN's) is not refused for its neighbour.
    if (rule._tag === "Domain" && name === undefined) {
      const resolved = destination.namesOf(address).find((known) => domainRuleMatches(rule, known))
      if (resolved !== undefined) return deny(`deny_out rule "${text}" (${address} is an address of ${resolved})`)
    }
  }
  if (!destination.named && [...deny_out, ...allow_out].some(({ rule }) => rule._tag === "Domain")) {
    return allow_out.some(({ rule }) => rule._tag === "Cidr" && ruleMatches(rule, undefined, address))
      ? ALLOW
      : deny("the connection names no host (no Host header, no TLS server name) and the policy has domain rules")
  }
  if (policy.allow_out.length > 0) {
    return allow_out.some(({ rule }) => ruleMatches(rule, name, address))
      ? ALLOW
      : deny("no allow_out rule matches")
  }
  return defaultAction === "allow"
    ? ALLOW
    : deny("the operator's default is deny (SVC_EGRESS_DEFAULT) and allow_out is empty")
}

/** Both checks, address first. */
export const decide = (
  rules: AddressRules,
  policy: NetworkPolicy,
  defaultAction: DefaultAction,
  destination: Destination
): Verdict => {
  const verdict = checkAddress(destination.address, rules)
  return verdict._tag === "Deny" ? verdict : checkPolicy(policy, defaultAction, destination)
}
