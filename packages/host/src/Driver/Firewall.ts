/**
 * The sandbox firewall: an nftables table per bridge, `inet svc_<bridge>`, that the driver
 * installs when it starts. A sandbox reaches no address of its host (IPv4 or IPv6, any port),
 * and nothing is forwarded from or to the bridge, so it reaches no other sandbox and nothing
 * outside the machine. The host still opens connections into sandboxes (exposed ports at
 * `internalIp:port`): their replies are the only traffic accepted from the bridge.
 *
 * The ruleset is a pure function of the settings (`renderRuleset`), applied with one
 * `nft -f -` transaction that creates the table if absent, deletes it and defines it again:
 * atomic, so several agents sharing the bridge install the same table without ever leaving a
 * moment without rules, and nothing outside this table is touched. The table is never removed:
 * sandboxes outlive their agent, and so do their rules (a reboot clears both; the next agent
 * start installs the rules again).
 *
 * Egress (`settings.egress`): every TCP connection a sandbox opens, to any address and port, is
 * redirected (nat prerouting) to the egress front on the gateway (`tcpPort`), and every UDP
 * datagram to port 53 to the sandboxes' DNS resolver (`dnsPort`); only those two are accepted
 * at the gateway, everything else from the bridge (other UDP, ICMP, IPv6) is dropped as before.
 * The front learns the original destination from conntrack (SO_ORIGINAL_DST). Forwarding stays
 * closed: nothing of a sandbox leaves the host but what the egress proxy sends on its behalf.
 * The ports are machine-wide (every agent on the bridge renders the same table); one agent's
 * front serves the whole bridge (@svc/egress).
 */
import { Effect, Schedule } from "effect"
import { DriverFailure } from "../Driver.ts"
import { intToIp, type SandboxSubnet } from "./Network.ts"
import { decode, run } from "./Process.ts"

export interface FirewallSettings {
  /** The bridge every sandbox's veth is attached to. */
  readonly bridge: string
  readonly subnet: SandboxSubnet
  /**
   * TCP ports on the gateway address a sandbox may open connections to (an egress proxy on the
   * host). Empty until the egress issue: a sandbox reaches nothing of the host.
   */
  readonly hostTcpPorts?: ReadonlyArray<number>
  /** Redirect the sandboxes' TCP and DNS to the egress front and resolver on the gateway. */
  readonly egress?: EgressPorts
}

/** The gateway ports of the egress front (all TCP) and of the sandboxes' DNS resolver (UDP 53). */
export interface EgressPorts {
  readonly tcpPort: number
  readonly dnsPort: number
}

/** Ranges a sandbox never reaches, even once egress opens (non-overlapping: nft refuses overlaps). */
export const BLOCKED_IPV4: ReadonlyArray<string> = [
  "0.0.0.0/8", // "this" network
  "10.0.0.0/8", // private (holds the sandboxes' own subnet by default)
  "100.64.0.0/10", // carrier-grade NAT
  "127.0.0.0/8", // loopback
  "169.254.0.0/16", // link-local, cloud metadata at 169.254.169.254
  "172.16.0.0/12", // private
  "192.0.0.0/24", // IETF protocol assignments
  "192.168.0.0/16", // private
  "198.18.0.0/15", // benchmarking
  "224.0.0.0/3" // multicast, reserved, broadcast
]

export const BLOCKED_IPV6: ReadonlyArray<string> = [
  "::/127", // unspecified and loopback
  "::ffff:0.0.0.0/96", // IPv4-mapped: the IPv4 ranges through the back door
  "64:ff9b::/96", // NAT64
  "64:ff9b:1::/48", // local-use NAT64
  "fc00::/7", // unique local, cloud metadata at fd00:ec2::254
  "fe80::/10", // link-local
  "ff00::/8" // multicast
]

/** The driver's table for a bridge: its own name, so nothing else is ever touched. */
export const tableName = (bridge: string): string => `svc_${bridge}`

const cidr = (subnet: SandboxSubnet) => `${intToIp(subnet.base)}/${subnet.prefix}`

/**
 * Pure: the `nft -f -` script that replaces the bridge's table in one transaction. The leading
 * `table` creates it when absent so that `delete table` never fails; the definition after it is
 * the whole table.
 */
export const renderRuleset = (settings: FirewallSettings): string => {
  const table = `inet ${tableName(settings.bridge)}`
  const bridge = JSON.stringify(settings.bridge)
  const egress = settings.egress
  const ports = [...new Set([...(settings.hostTcpPorts ?? []), ...(egress !== undefined ? [egress.tcpPort] : [])])]
    .sort((a, b) => a - b)
  const gateway = settings.subnet.gateway
  const allowHost = [
    ...(ports.length === 0 ? [] : [`    ip daddr ${gateway} tcp dport { ${ports.join(", ")} } ct state new accept`]),
    ...(egress === undefined ? [] : [`    ip daddr ${gateway} udp dport ${egress.dnsPort} accept`])
  ]
  // Only new connections are redirected (nat sees a connection's first packet); the host's own
  // connections into a sandbox and their replies are untouched.
  const redirect = egress === undefined ? [] : [
    `  chain egress_redirect {`,
    `    type nat hook prerouting priority dstnat; policy accept;`,
    `    iifname ${bridge} ip saddr ${cidr(settings.subnet)} meta l4proto tcp redirect to :${egress.tcpPort}`,
    `    iifname ${bridge} ip saddr ${cidr(settings.subnet)} udp dport 53 redirect to :${egress.dnsPort}`,
    `  }`
  ]
  return [
    `table ${table}`,
    `delete table ${table}`,
    `table ${table} {`,
    `  set blocked_v4 {`,
    `    type ipv4_addr; flags interval`,
    `    elements = { ${BLOCKED_IPV4.join(", ")} }`,
    `  }`,
    `  set blocked_v6 {`,
    `    type ipv6_addr; flags interval`,
    `    elements = { ${BLOCKED_IPV6.join(", ")} }`,
    `  }`,
    // Whatever a sandbox sends to any address of this machine arrives here with the bridge as
    // its input interface: the gateway, eth0's addresses, the bridge's link-local, loopback.
    `  chain input {`,
    `    type filter hook input priority filter; policy accept;`,
    `    iifname ${bridge} jump sandbox_to_host`,
    `  }`,
    ...redirect,
    `  chain sandbox_to_host {`,
    // Replies of the host's own connections into a sandbox (exposed ports at internalIp:port).
    `    ip saddr ${cidr(settings.subnet)} ct state established,related accept`,
    ...allowHost,
    `    counter drop`,
    `  }`,
    // Routed traffic (when forwarding is on): with bridge netfilter, frames between two
    // sandboxes on the bridge pass this hook too.
    `  chain forward {`,
    `    type filter hook forward priority filter; policy accept;`,
    `    iifname ${bridge} jump sandbox_forward`,
    `    oifname ${bridge} counter drop`,
    `  }`,
    `  chain sandbox_forward {`,
    `    ip daddr @blocked_v4 counter drop`,
    `    ip6 daddr @blocked_v6 counter drop`,
    // The internet is reached only through the egress proxy on the host: nothing is forwarded.
    `    counter drop`,
    `  }`,
    `}`
  ].join("\n") + "\n"
}

export type FirewallStatus =
  | { readonly _tag: "Installed"; readonly table: string }
  | { readonly _tag: "Skipped"; readonly reason: string }

const OPT_OUT = "SVC_AGENT_ALLOW_NO_FIREWALL=1"

/**
 * Installs (or replaces) the bridge's table. Without `nft`, or when it fails, the driver must
 * not start, unless the operator allowed sandboxes without a firewall: then it warns and goes on.
 */
export const installFirewall = Effect.fn("Firewall.install")(function*(options: {
  /** Absolute path of `nft`, undefined when it is not installed. */
  readonly nft: string | undefined
  readonly settings: FirewallSettings
  readonly allowNoFirewall: boolean
}) {
  const table = `inet ${tableName(options.settings.bridge)}`
  const nft = options.nft
  const apply: Effect.Effect<FirewallStatus, DriverFailure> = nft === undefined
    ? Effect.fail(
      new DriverFailure({
        operation: "firewall",
        message:
          `nft is not installed (Debian package nftables): the sandbox firewall cannot be installed; install it, or set ${OPT_OUT} to run sandboxes that can reach this host`
      })
    )
    : run("firewall", nft, ["-f", "-"], { stdin: Buffer.from(renderRuleset(options.settings)), timeoutMs: 10_000 })
      .pipe(
        Effect.map((result) =>
          result.exitCode === 0
            ? undefined
            : `exit ${result.exitCode}${result.timedOut ? " (timed out)" : ""}: ${
              decode(result.stderr).trim().slice(0, 1000)
            }`
        ),
        Effect.catchTag("DriverFailure", (e) => Effect.succeed(e.message)),
        Effect.flatMap((problem) =>
          problem === undefined
            ? Effect.succeed<FirewallStatus>({ _tag: "Installed", table })
            : Effect.fail(
              new DriverFailure({
                operation: "firewall",
                message:
                  `nft -f - (table ${table}): ${problem}; fix nftables, or set ${OPT_OUT} to run sandboxes that can reach this host`
              })
            )
        ),
        // Another agent's transaction at the same moment can make the kernel refuse ours: once more.
        Effect.retry({ times: 2, schedule: Schedule.spaced("100 millis") })
      )
  if (!options.allowNoFirewall) return yield* apply
  return yield* apply.pipe(
    Effect.catchTag(
      "DriverFailure",
      (failure) =>
        Effect.logWarning(
          `sandbox firewall not installed (${OPT_OUT}): sandboxes can reach this host's services`,
          failure.message
        ).pipe(
          Effect.as<FirewallStatus>({ _tag: "Skipped", reason: failure.message })
        )
    )
  )
})
