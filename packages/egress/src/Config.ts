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
 * | `SVC_EGRESS_MAX_SANDBOX_CONNECTIONS` | `256` | open connections per sandbox (source address) through the front; past it a new one is reset at once |
 * | `SVC_EGRESS_MAX_CONNECTIONS` | `4096` | open connections through the front in all (lowered to what its fd limit allows, 2 fds each) |
 * | `SVC_EGRESS_IDLE_TIMEOUT` | `10m` | a relayed connection with no byte either way for this long is closed |
 */
import * as Env from "@svc/config/Env"
import { type Subnet, SubnetsFromString } from "@svc/domain/Address"
import { Config, Duration } from "effect"

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

export const DEFAULT_MAX_CONNECTIONS_PER_SANDBOX = 256
export const DEFAULT_MAX_CONNECTIONS = 4096
export const DEFAULT_IDLE_TIMEOUT_SECONDS = 600
export const EgressMaxConnectionsPerSandbox = Env.integer(
  "SVC_EGRESS_MAX_SANDBOX_CONNECTIONS",
  DEFAULT_MAX_CONNECTIONS_PER_SANDBOX,
  { min: 1, max: 1_048_576 }
)
export const EgressMaxConnections = Env.integer("SVC_EGRESS_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS, {
  min: 1,
  max: 1_048_576
})
export const EgressIdleTimeout = Env.duration(
  "SVC_EGRESS_IDLE_TIMEOUT",
  Duration.seconds(DEFAULT_IDLE_TIMEOUT_SECONDS),
  {
    min: Duration.seconds(1),
    max: Duration.days(7)
  }
)

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
  /** The front's bounds (native/svc-egress-front.c): per source address, in all, idle seconds. */
  readonly maxConnectionsPerSandbox: number
  readonly maxConnections: number
  readonly idleTimeoutSeconds: number
}

export const EgressConfig: Config.Config<EgressSettings> = Config.all({
  defaultAction: EgressDefault,
  allowedSubnets: EgressAllowedSubnets,
  hostsFile: EgressHostsFile,
  upstreamCaFile: EgressUpstreamCaFile,
  tcpPort: EgressPort,
  dnsPort: EgressDnsPort,
  maxConnectionsPerSandbox: EgressMaxConnectionsPerSandbox,
  maxConnections: EgressMaxConnections,
  idleTimeoutSeconds: EgressIdleTimeout.pipe(Config.map((d) => Math.ceil(Duration.toSeconds(d))))
})

export const settings: ReadonlyArray<Env.AnySetting> = [
  EgressDefault,
  EgressAllowedSubnets,
  EgressHostsFile,
  EgressUpstreamCaFile,
  EgressPort,
  EgressDnsPort,
  EgressMaxConnectionsPerSandbox,
  EgressMaxConnections,
  EgressIdleTimeout
]
