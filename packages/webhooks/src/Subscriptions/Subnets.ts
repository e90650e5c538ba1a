/**
 * The grammar of `SVC_WEBHOOK_ALLOWED_SUBNETS` (read in ../Config.ts): comma-separated CIDRs
 * webhooks may target besides public addresses.
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
export const AllowedSubnetsFromString = Schema.String.pipe(
  Schema.decodeTo(
    Schema.Array(SubnetSchema),
    SchemaTransformation.transformEffect({
      decode: (input: string, options) =>
        Result.match(parseAllowedSubnets(input), {
          onSuccess: (subnets) => Effect.succeed(subnets),
          onFailure: (message) =>
            Effect.fail(
              new SchemaIssue.InvalidValue({ message: `SVC_WEBHOOK_ALLOWED_SUBNETS: ${message}` }, input, options)
            )
        }),
      encode: (subnets: ReadonlyArray<Subnet>) => Effect.succeed(subnets.map(formatSubnet).join(","))
    })
  )
)
