/**
 * Which IP addresses are public, and the operator's lists of subnets allowed besides them: shared
 * by the webhooks' URL guard (SVC_WEBHOOK_ALLOWED_SUBNETS) and the hosts' egress proxies
 * (SVC_EGRESS_ALLOWED_SUBNETS), so both refuse the same private, loopback, link-local, metadata
 * and reserved ranges, IPv4 and IPv6.
 */
import { Effect, Result, Schema, SchemaIssue, SchemaTransformation } from "effect"
import * as net from "node:net"

export type IpFamily = "ipv4" | "ipv6"

export interface Subnet {
  readonly address: string
  readonly prefix: number
  readonly family: IpFamily
}

const PREFIX = /^\d{1,3}$/

/**
 * Parses `10.0.0.0/8, fd00::/8, 192.0.2.7`: comma-separated CIDRs (a bare address means that one
 * address); empty entries are ignored. The first bad entry is the error.
 */
export const parseAllowedSubnets = (input: string): Result.Result<ReadonlyArray<Subnet>, string> => {
  const subnets: Array<Subnet> = []
  for (const raw of input.split(",")) {
    const entry = raw.trim()
    if (entry === "") continue
    const slash = entry.indexOf("/")
    const address = slash === -1 ? entry : entry.slice(0, slash)
    const kind = net.isIP(address)
    if (kind === 0 || address.includes("%")) {
      return Result.fail(`"${entry}" is not a CIDR (address/prefix) of an IPv4 or IPv6 address`)
    }
    const max = kind === 4 ? 32 : 128
    let prefix = max
    if (slash !== -1) {
      const text = entry.slice(slash + 1)
      prefix = PREFIX.test(text) ? Number(text) : Number.NaN
      if (!(prefix >= 0 && prefix <= max)) {
        return Result.fail(`"${entry}" has an invalid prefix length (0 to ${max})`)
      }
    }
    subnets.push({ address, prefix, family: kind === 4 ? "ipv4" : "ipv6" })
  }
  return Result.succeed(subnets)
}

const formatSubnet = (subnet: Subnet) => `${subnet.address}/${subnet.prefix}`

export const SubnetSchema = Schema.Struct({
  address: Schema.String,
  prefix: Schema.Int,
  family: Schema.Literals(["ipv4", "ipv6"])
})

/** `SVC_WEBHOOK_ALLOWED_SUBNETS` text ⇄ subnets; a bad entry is a schema issue naming it. */

/** Named ranges that are not public. Order matters only for the label reported. */
const NON_PUBLIC_V4: ReadonlyArray<readonly [label: string, cidr: string]> = [
  ["unspecified", "0.0.0.0/8"],
  ["private", "10.0.0.0/8"],
  ["shared address space (CGNAT)", "100.64.0.0/10"],
  ["loopback", "127.0.0.0/8"],
  ["link-local", "169.254.0.0/16"],
  ["private", "172.16.0.0/12"],
  ["IETF protocol assignments", "192.0.0.0/24"],
  ["documentation", "192.0.2.0/24"],
  ["6to4 relay anycast", "192.88.99.0/24"],
  ["private", "192.168.0.0/16"],
  ["benchmarking", "198.18.0.0/15"],
  ["documentation", "198.51.100.0/24"],
  ["documentation", "203.0.113.0/24"],
  ["multicast", "224.0.0.0/4"],
  ["broadcast", "255.255.255.255/32"],
  ["reserved", "240.0.0.0/4"]
]

const NON_PUBLIC_V6: ReadonlyArray<readonly [label: string, cidr: string]> = [
  ["unspecified", "::/128"],
  ["loopback", "::1/128"],
  // Checked apart from the v4 ranges on purpose: a mapped address would reach the embedded v4
  // one, and refusing the whole range is simpler than re-checking it.
  ["IPv4-mapped", "::ffff:0:0/96"],
  ["IPv4-compatible", "::/96"],
  ["IPv4/IPv6 translation (NAT64)", "64:ff9b::/96"],
  ["IPv4/IPv6 translation (NAT64)", "64:ff9b:1::/48"],
  ["discard-only", "100::/64"],
  ["Teredo", "2001::/32"],
  ["benchmarking", "2001:2::/48"],
  ["ORCHID", "2001:10::/28"],
  ["ORCHIDv2", "2001:20::/28"],
  ["IETF protocol assignments", "2001::/23"],
  ["documentation", "2001:db8::/32"],
  ["6to4", "2002::/16"],
  ["documentation", "3fff::/20"],
  ["unique local", "fc00::/7"],
  ["site-local", "fec0::/10"],
  ["link-local", "fe80::/10"],
  ["multicast", "ff00::/8"]
]

/**
 * One BlockList per family: Node's BlockList matches IPv4 addresses against IPv4-mapped IPv6
 * rules and the other way round (measured on Node 24: `::ffff:0:0/96` matches `1.1.1.1`), which
 * would make every IPv4 address look "IPv4-mapped". Each address is only checked against rules of
 * its own family.
 */
export interface FamilyRules {
  readonly v4: net.BlockList
  readonly v6: net.BlockList
}

export const emptyRules = (): FamilyRules => ({ v4: new net.BlockList(), v6: new net.BlockList() })

const addSubnet = (rules: FamilyRules, subnet: Subnet) =>
  subnet.family === "ipv4"
    ? rules.v4.addSubnet(subnet.address, subnet.prefix, "ipv4")
    : rules.v6.addSubnet(subnet.address, subnet.prefix, "ipv6")

const splitCidr = (cidr: string): Subnet => {
  const [address, prefix] = cidr.split("/") as [string, string]
  return { address, prefix: Number(prefix), family: net.isIPv6(address) ? "ipv6" : "ipv4" }
}

const labelled = (ranges: ReadonlyArray<readonly [string, string]>, family: IpFamily) =>
  ranges.map(([label, cidr]) => {
    const list = new net.BlockList()
    const subnet = splitCidr(cidr)
    list.addSubnet(subnet.address, subnet.prefix, family)
    return { label, list }
  })

const NON_PUBLIC_V4_LISTS = labelled(NON_PUBLIC_V4, "ipv4")
const NON_PUBLIC_V6_LISTS = labelled(NON_PUBLIC_V6, "ipv6")

/** IPv6 global unicast is 2000::/3; everything outside it is not a public destination. */
const GLOBAL_UNICAST_V6 = (() => {
  const list = new net.BlockList()
  list.addSubnet("2000::", 3, "ipv6")
  return list
})()

export type AddressClass =
  | { readonly _tag: "Public" }
  | { readonly _tag: "Allowed" }
  | { readonly _tag: "NonPublic"; readonly range: string }

/**
 * Classifies one IP address (no brackets). Operator-allowed subnets win over the non-public
 * ranges; anything that is not a plain IP address (zone ids such as `fe80::1%eth0`, garbage) is
 * non-public.
 */
export const classifyAddress = (address: string, allowed: FamilyRules = emptyRules()): AddressClass => {
  const kind = address.includes("%") ? 0 : net.isIP(address)
  if (kind === 4) {
    if (allowed.v4.check(address, "ipv4")) return { _tag: "Allowed" }
    const hit = NON_PUBLIC_V4_LISTS.find(({ list }) => list.check(address, "ipv4"))
    return hit === undefined ? { _tag: "Public" } : { _tag: "NonPublic", range: hit.label }
  }
  if (kind === 6) {
    if (allowed.v6.check(address, "ipv6")) return { _tag: "Allowed" }
    const hit = NON_PUBLIC_V6_LISTS.find(({ list }) => list.check(address, "ipv6"))
    if (hit !== undefined) return { _tag: "NonPublic", range: hit.label }
    return GLOBAL_UNICAST_V6.check(address, "ipv6")
      ? { _tag: "Public" }
      : { _tag: "NonPublic", range: "not global unicast" }
  }
  return { _tag: "NonPublic", range: "not an IP address" }
}

/** The operator's allowed subnets as the rules `classifyAddress` takes. */
export const allowedRules = (subnets: ReadonlyArray<Subnet>): FamilyRules => {
  const rules = emptyRules()
  for (const subnet of subnets) addSubnet(rules, subnet)
  return rules
}

/** A subnets variable's text ⇄ subnets; a bad entry is a schema issue naming the variable. */
export const SubnetsFromString = (variable: string) =>
  Schema.String.pipe(
    Schema.decodeTo(
      Schema.Array(SubnetSchema),
      SchemaTransformation.transformEffect({
        decode: (input: string, options) =>
          Result.match(parseAllowedSubnets(input), {
            onSuccess: (subnets) => Effect.succeed(subnets),
            onFailure: (message) =>
              Effect.fail(new SchemaIssue.InvalidValue({ message: `${variable}: ${message}` }, input, options))
          }),
        encode: (subnets: ReadonlyArray<Subnet>) => Effect.succeed(subnets.map(formatSubnet).join(","))
      })
    )
  )

/** Whether `address` lies in `subnet` (same family only). */
export const inSubnet = (address: string, subnet: Subnet): boolean => {
  const kind = net.isIP(address)
  if (kind === 0 || (kind === 4) !== (subnet.family === "ipv4")) return false
  const list = new net.BlockList()
  list.addSubnet(subnet.address, subnet.prefix, subnet.family)
  return list.check(address, subnet.family)
}
