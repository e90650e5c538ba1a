/**
 * The egress decision, pure: may this sandbox reach this address (under this name)?
 *
 * In order: an address that is not public (private, loopback, link-local and metadata, CGNAT,
 * reserved, IPv4 and IPv6: @svc/domain/Address) is refused unless the operator allowed its
 * subnet, and the platform's own addresses (the sandboxes' subnet, this host's interfaces) are
 * refused even then; a matching `deny_out` rule refuses; a non-empty `allow_out` must match;
 * an empty one follows the operator's default. Domain rules match the name the connection
 * carried (HTTP Host, TLS SNI); CIDR rules match the address the proxy resolved and connects to.
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

const ruleMatches = (rule: ParsedRule, name: string | undefined, address: string): boolean => {
  if (rule._tag === "Domain") {
    return name !== undefined && domainMatches(rule.wildcard ? `*.${rule.name}` : rule.name, name)
  }
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

/** The sandbox's own policy over one destination (the address already passed `checkAddress`). */
export const checkPolicy = (
  policy: NetworkPolicy,
  defaultAction: DefaultAction,
  name: string | undefined,
  address: string
): Verdict => {
  for (const { rule, text } of parsed(policy.deny_out)) {
    if (ruleMatches(rule, name, address)) return deny(`deny_out rule "${text}"`)
  }
  if (policy.allow_out.length > 0) {
    return parsed(policy.allow_out).some(({ rule }) => ruleMatches(rule, name, address))
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
  name: string | undefined,
  address: string
): Verdict => {
  const byAddress = checkAddress(address, rules)
  return byAddress._tag === "Deny" ? byAddress : checkPolicy(policy, defaultAction, name, address)
}
