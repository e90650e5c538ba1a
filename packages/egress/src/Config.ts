/**
 * The operator's settings of the egress proxy (read by the agent role, which runs it).
 *
 * | variable | default | meaning |
 * |---|---|---|
 * | `SVC_EGRESS_DEFAULT` | `allow` | `allow`: a sandbox whose `allow_out` is empty reaches any public address; `deny`: only what `allow_out` names |
 * | `SVC_EGRESS_ALLOWED_SUBNETS` | empty | non-public CIDRs sandboxes may reach besides public addresses (the grammar of `SVC_WEBHOOK_ALLOWED_SUBNETS`) |
 * | `SVC_EGRESS_HOSTS_FILE` | empty | a hosts-format file whose names the sandboxes' resolver and the proxy answer from first |
 * | `SVC_EGRESS_UPSTREAM_CA_FILE` | empty | PEM CAs the proxy trusts upstream besides the system's (where it writes a secret into HTTPS) |
 * | `SVC_EGRESS_PORT` | `15001` | the egress front's TCP port on the bridge's gateway (machine-wide, like the bridge) |
 * | `SVC_EGRESS_DNS_PORT` | `15053` | the sandboxes' resolver's UDP port on the gateway (machine-wide) |
 * | `SVC_EGRESS_IDLE_TIMEOUT_S` | `300` | a sandbox's connection through the proxy with no byte either way for this long is closed |
 */
import * as Env from "@svc/config/Env"
import { type Subnet, SubnetsFromString } from "@svc/domain/Address"
import { Config } from "effect"

export type DefaultAction = "allow" | "deny"

export const EgressDefault: Env.Setting<DefaultAction> = Env.describe(
  Config.Literals(["allow", "deny"], "SVC_EGRESS_DEFAULT").pipe(Config.withDefault<DefaultAction>("allow")),
  { name: "SVC_EGRESS_DEFAULT", default: "`allow`", format: "`allow` or `deny`" }
)

export const EgressAllowedSubnets: Env.Setting<ReadonlyArray<Subnet>> = Env.describe(
  Config.schema(SubnetsFromString("SVC_EGRESS_ALLOWED_SUBNETS"), "SVC_EGRESS_ALLOWED_SUBNETS").pipe(
    Config.withDefault<ReadonlyArray<Subnet>>([])
  ),
  { name: "SVC_EGRESS_ALLOWED_SUBNETS", default: "empty", format: "CIDRs" }
)

export const EgressHostsFile = Env.text("SVC_EGRESS_HOSTS_FILE", "", "path")
export const EgressUpstreamCaFile = Env.text("SVC_EGRESS_UPSTREAM_CA_FILE", "", "path")

export const DEFAULT_EGRESS_PORT = 15001
export const DEFAULT_EGRESS_DNS_PORT = 15053
export const EgressPort = Env.integer("SVC_EGRESS_PORT", DEFAULT_EGRESS_PORT, { min: 1, max: 65_535 })
export const EgressDnsPort = Env.integer("SVC_EGRESS_DNS_PORT", DEFAULT_EGRESS_DNS_PORT, { min: 1, max: 65_535 })
export const DEFAULT_EGRESS_IDLE_TIMEOUT_S = 300
export const EgressIdleTimeout = Env.integer("SVC_EGRESS_IDLE_TIMEOUT_S", DEFAULT_EGRESS_IDLE_TIMEOUT_S, {
  min: 1,
  max: 86_400
})

/** What the proxy needs from its operator (the agent adds the bridge, the leases and its data dir). */
export interface EgressSettings {
  readonly defaultAction: DefaultAction
  readonly allowedSubnets: ReadonlyArray<Subnet>
  /** Empty: none. */
  readonly hostsFile: string
  /** Empty: the system's CAs only. */
  readonly upstreamCaFile: string
  readonly tcpPort: number
  readonly dnsPort: number
  /** Seconds a connection may carry no byte in either direction before the proxy closes it. */
  readonly idleTimeoutS: number
}

export const EgressConfig: Config.Config<EgressSettings> = Config.all({
  defaultAction: EgressDefault,
  allowedSubnets: EgressAllowedSubnets,
  hostsFile: EgressHostsFile,
  upstreamCaFile: EgressUpstreamCaFile,
  tcpPort: EgressPort,
  dnsPort: EgressDnsPort,
  idleTimeoutS: EgressIdleTimeout
})

export const settings: ReadonlyArray<Env.AnySetting> = [
  EgressDefault,
  EgressAllowedSubnets,
  EgressHostsFile,
  EgressUpstreamCaFile,
  EgressPort,
  EgressDnsPort,
  EgressIdleTimeout
]
