/**
 * Configuration of one host agent, from the environment (`AgentConfig.fromEnv`) or given
 * field by field (`AgentConfig.layer`, for tests that run several agents in one process).
 * Every variable the agent reads is a setting below (the root README's table lists them with
 * their defaults); `settings` adds the bus's and the keys' it reads through its packages.
 *
 *   SVC_HOST_ID           `host_<26 base32>`; default derived from the machine's hostname
 *   SVC_REGION            default `local`
 *   SVC_DATACENTER        default `local-1`
 *   SVC_HOST_CPU / SVC_HOST_RAM_MB / SVC_HOST_DISK_GB   cores, memory and disk; defaults from the machine
 *                         (disk: 90% of the data dir's free space plus what its sandbox disks hold)
 *   SVC_HOST_CPU_OVERCOMMIT  default 8: the scheduler may place cores × this much `cpu` here (a
 *                         sandbox's cpu is a cap, not a reservation); memory and disk are not overcommitted
 *   SVC_AGENT_ALLOW_UNLIMITED  `1`: start even when the host cannot enforce a memory, cpu, pids or disk
 *                         limit (the host record says which hold); default: refuse to start
 *   SVC_AGENT_PORT        data-plane port, 0 (default) = any free port
 *   SVC_AGENT_HOST        data-plane bind address, default 127.0.0.1
 *   SVC_AGENT_ADVERTISE_HOST  address other processes use to reach it (default: the bind
 *                         address, or 127.0.0.1 when bound to 0.0.0.0)
 *   SVC_DATA_DIR          root of the agents' data, default `.svc/data` of the working directory
 *                         (`svc dev` sets `<SVC_STATE_DIR>/data`)
 *   SVC_AGENT_DATA_DIR    the driver's data dir of this host; default `<SVC_DATA_DIR>/hosts/<hostId>`
 *   SVC_SHARED_VOLUMES_DIR  shared volumes' images and mounts, one folder for every agent of the
 *                         machine; default `<SVC_DATA_DIR>/shared-volumes`
 *   SVC_AGENT_HEARTBEAT   host heartbeat, default 2s (HOST_HEARTBEAT_MS)
 *   SVC_AGENT_CONCURRENCY    commands applied at once (one sandbox's commands stay in order)
 *   SVC_AGENT_POOL_SIZE      pre-started `base` sandboxes kept ready (default 4; 0 turns the pool off)
 *   SVC_AGENT_MAX_TRANSFERS  file uploads and downloads streamed at once (default 32); more wait
 *   SVC_AGENT_MAX_TRANSFERS_PER_ORG  of those, what one org holds (default 8); more are 429 at once
 *   SVC_AGENT_TRANSFER_IDLE_TIMEOUT  a transfer moving no byte this long is cut (default 2m)
 *   SVC_SANDBOX_BRIDGE / SVC_SANDBOX_SUBNET / SVC_SANDBOX_UID_BASE / SVC_SANDBOX_UID_SLOTS
 *                         the driver's machine-wide settings
 *   SVC_AGENT_ALLOW_NO_FIREWALL   1: start even when the sandbox firewall cannot be installed
 *   SVC_IMAGE_CACHE_DIR   where the `debian` archive is built and cached (default `<dataDir>/cache`);
 *                         agents of one machine may share one
 *   SVC_REGISTRY_* / SVC_IMAGE_*_MB / SVC_IMAGE_PULL_STALL_TIMEOUT  pulls of OCI images (@svc/host/Oci/Config)
 *   SVC_VERSION           reported in the host record (@svc/bus/Config)
 *   SVC_EGRESS_*          the sandboxes' egress proxy (@svc/egress/Config): on from the environment;
 *                         off for agents made in tests unless `egress` is given
 */
import * as Bus from "@svc/bus/Config"
import * as Env from "@svc/config/Env"
import * as Crypto from "@svc/crypto/Config"
import { SubnetSchema } from "@svc/domain/Address"
import { HostId } from "@svc/domain/Ids"
import * as Egress from "@svc/egress/Config"
import { type Capacity, HOST_HEARTBEAT_MS } from "@svc/host-protocol/Protocol"
import { METRICS_INTERVAL_MS } from "@svc/host-protocol/SandboxTelemetry"
import {
  DEFAULT_BRIDGE,
  DEFAULT_SUBNET,
  DEFAULT_UID_BASE,
  DEFAULT_UID_SLOTS,
  UidBase as UidBaseSchema,
  UidSlots as UidSlotsSchema
} from "@svc/host/Driver/Config"
import { imagesAllocatedBytes } from "@svc/host/Driver/Disk"
import * as Oci from "@svc/host/Oci/Config"
import * as Telemetry from "@svc/telemetry/Config"
import { Config, Context, Duration, Effect, Layer, Option, Schema } from "effect"
import { createHash } from "node:crypto"
import * as FsSync from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"

export interface AgentSettings {
  readonly hostId: string
  readonly region: string
  readonly datacenter: string
  readonly version: string
  /** What the scheduler may place here: `cpu` is the cores times `cpuOvercommit`. */
  readonly capacity: Capacity
  /** How many `cpu` of sandboxes one core carries (cpu limits are caps: idle sandboxes use none). */
  readonly cpuOvercommit: number
  /** Start even when a memory, cpu, pids or disk limit cannot be applied on this host. */
  readonly allowUnlimited: boolean
  /** How often running sandboxes are checked for an init that died. */
  readonly exitCheckMs: number
  /** 0 = any free port. */
  readonly port: number
  readonly listenHost: string
  readonly advertiseHost: string
  /** The driver's data dir (templates/, sandboxes/); the agent keeps its journal in `agent/`. */
  readonly dataDir: string
  readonly heartbeatMs: number
  readonly concurrency: number
  /** Pre-started `base` sandboxes kept ready for creates (0: none). */
  readonly poolSize: number
  /** File transfers (uploads, downloads) streamed at once; more wait for a slot. */
  readonly maxTransfers: number
  /** Of those, what one org holds at once; more are refused (429) without waiting. */
  readonly maxTransfersPerOrg: number
  /** A transfer that moves no byte this long has its connection closed. */
  readonly transferIdleMs: number
  /** The host bridge and the sandboxes' addresses (machine-wide: every agent of a machine shares them). */
  readonly bridge: string
  readonly subnet: string
  /**
   * Host uid/gid that owns root's files of every sandbox (the driver's `uidBase`); each running
   * sandbox is one of `uidSlots` ranges of 65536 above it.
   */
  readonly uidBase: number
  readonly uidSlots: number
  /** Start even when the sandbox firewall (nftables) cannot be installed. */
  readonly allowNoFirewall: boolean
  /** The cgroup file system the driver uses (default `/sys/fs/cgroup`). */
  readonly cgroupRoot?: string
  /** Where built image roots (the `debian` archive) are cached; `SVC_IMAGE_CACHE_DIR`, default `<dataDir>/cache`. */
  readonly imageCacheDir?: string
  /**
   * Shared volumes' images and their one mount per machine (the driver's `sharedVolumesDir`):
   * the same folder for every agent of a machine. Default `<dataDir>/shared-volumes`.
   */
  readonly sharedVolumesDir: string
  /** The sandboxes' way out through this host (@svc/egress); unset: sandboxes reach nothing outside. */
  readonly egress?: Egress.EgressSettings
  /** Time between two metric samples (and reads of the `start_cmd` output) of each running sandbox. */
  readonly metricsIntervalMs: number
}

/**
 * What a caller may set; everything else takes its default. `capacity.cpu` is the host's cores
 * (as `SVC_HOST_CPU`): the capacity offered multiplies it by `cpuOvercommit`.
 */
export type AgentOptions = Partial<Omit<AgentSettings, "capacity" | "egress">> & {
  readonly capacity?: Partial<Capacity>
  /** Egress on, with these settings over the defaults. */
  readonly egress?: Partial<Egress.EgressSettings>
}

export class InvalidAgentConfig extends Schema.TaggedError<InvalidAgentConfig>()("InvalidAgentConfig", {
  message: Schema.String
}) {}

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"

/**
 * A stable host id for a machine name: the time part is zero (it was derived, not minted) and
 * the 16 random characters come from a hash of the name, so a restarted agent finds its durable
 * consumer and its hosts record again.
 */
export const hostIdFromHostname = (hostname: string): string => {
  const digest = createHash("sha256").update(`svc-host:${hostname}`).digest()
  let body = ""
  for (let i = 0; i < 16; i++) body += ALPHABET[digest[i]! & 31]
  return `host_0000000000${body}`
}

/** `SVC_DATA_DIR` when unset: relative to the working directory (`npm start` runs in the repository). */
export const DEFAULT_DATA_ROOT = ".svc/data"

/** A host's data dir under the agents' data root. */
export const dataDirUnder = (root: string, hostId: string) => NodePath.resolve(root, "hosts", hostId)

/**
 * What sandbox disks may take of the file system that holds `dir` (or its nearest existing
 * parent), in GB: 90% of its free space plus what this host's disk images already hold (the
 * scheduler counts each sandbox's whole `disk_gb`). Images are sparse: a capacity above the free
 * space would let sandboxes together fill the file system the platform's data lives on.
 */
const diskGbOf = (dir: string): number => {
  let probe = dir
  while (!FsSync.existsSync(probe) && NodePath.dirname(probe) !== probe) probe = NodePath.dirname(probe)
  try {
    const stats = FsSync.statfsSync(probe)
    const usable = stats.bavail * stats.bsize + imagesAllocatedBytes(NodePath.join(dir, "sandboxes"))
    return Math.max(1, Math.floor((0.9 * usable) / 1024 ** 3))
  } catch {
    return 1
  }
}

const Name = Schema.String.check(
  Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/, { message: "1 to 63 of [A-Za-z0-9_.-]" })
)
const Positive = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))

const SettingsSchema = Schema.Struct({
  hostId: HostId,
  region: Name,
  datacenter: Name,
  version: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(64)),
  capacity: Schema.Struct({ cpu: Positive, ramMb: Positive, diskGb: Positive }),
  cpuOvercommit: Schema.Number.check(Schema.isGreaterThanOrEqualTo(1), Schema.isLessThanOrEqualTo(64)),
  allowUnlimited: Schema.Boolean,
  exitCheckMs: Schema.Int.check(Schema.isGreaterThanOrEqualTo(50), Schema.isLessThanOrEqualTo(10_000)),
  metricsIntervalMs: Schema.Int.check(Schema.isGreaterThanOrEqualTo(100), Schema.isLessThanOrEqualTo(3_600_000)),
  port: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0), Schema.isLessThanOrEqualTo(65_535)),
  listenHost: Schema.String.check(Schema.isMinLength(1)),
  advertiseHost: Schema.String.check(Schema.isMinLength(1)),
  dataDir: Schema.String.check(
    Schema.isPattern(/^\/[^\0,:\s]*$/, { message: "absolute path without ',', ':' or spaces" })
  ),
  heartbeatMs: Schema.Int.check(Schema.isGreaterThanOrEqualTo(50), Schema.isLessThanOrEqualTo(60_000)),
  concurrency: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1), Schema.isLessThanOrEqualTo(256)),
  poolSize: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0), Schema.isLessThanOrEqualTo(64)),
  maxTransfers: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1), Schema.isLessThanOrEqualTo(4096)),
  maxTransfersPerOrg: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1), Schema.isLessThanOrEqualTo(4096)),
  transferIdleMs: Schema.Int.check(Schema.isGreaterThanOrEqualTo(100), Schema.isLessThanOrEqualTo(3_600_000)),
  bridge: Schema.String,
  subnet: Schema.String,
  uidBase: UidBaseSchema,
  uidSlots: UidSlotsSchema,
  allowNoFirewall: Schema.Boolean,
  cgroupRoot: Schema.optionalKey(Schema.String.check(Schema.isPattern(/^\/[^\0]*$/, { message: "absolute path" }))),
  imageCacheDir: Schema.optionalKey(Schema.String.check(Schema.isPattern(/^\/[^\0]*$/, { message: "absolute path" }))),
  sharedVolumesDir: Schema.String.check(Schema.isPattern(/^\/[^\0]*$/, { message: "absolute path" })),
  egress: Schema.optionalKey(Schema.Struct({
    defaultAction: Schema.Literals(["allow", "deny"]),
    allowedSubnets: Schema.Array(SubnetSchema),
    hostsFile: Schema.String,
    upstreamCaFile: Schema.String,
    tcpPort: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 65_535 })),
    dnsPort: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 65_535 })),
    maxConnectionsPerSandbox: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_048_576 })),
    maxConnections: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_048_576 })),
    idleTimeoutSeconds: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 604_800 }))
  }))
})

export const DEFAULT_REGION = "local"
export const DEFAULT_DATACENTER = "local-1"
export const DEFAULT_LISTEN_HOST = "127.0.0.1"
export const DEFAULT_CONCURRENCY = 4

/** `SVC_AGENT_POOL_SIZE` when unset. */
export const DEFAULT_POOL_SIZE = 4

/** `SVC_HOST_CPU_OVERCOMMIT` when unset. */
export const DEFAULT_CPU_OVERCOMMIT = 8

/** Running sandboxes are checked this often for an init that died (two /proc reads each). */
export const EXIT_CHECK_MS = 500

/**
 * `SVC_AGENT_MAX_TRANSFERS` when unset. A transfer in flight holds a few hundred KiB of buffers
 * in the agent and one writer or reader process chain in the sandbox.
 */
export const DEFAULT_MAX_TRANSFERS = 32
/**
 * `SVC_AGENT_MAX_TRANSFERS_PER_ORG` when unset: a quarter of the host's slots, so that one org
 * never holds them all and another org's transfer never waits behind its.
 */
export const DEFAULT_MAX_TRANSFERS_PER_ORG = 8
/**
 * `SVC_AGENT_TRANSFER_IDLE_TIMEOUT` when unset: beyond the API's own (1 min), so the API, which
 * can still answer its client, normally ends an idle transfer first; this is the host's backstop.
 */
export const DEFAULT_TRANSFER_IDLE_MS = 120_000

// ---------------------------------------------------------------------------------------------
// The settings (bounds beyond a number's sign are checked by SettingsSchema, for given options too)
// ---------------------------------------------------------------------------------------------

const optional = <A>(config: Config.Config<A>, variable: Env.Variable): Env.Setting<Option.Option<A>> =>
  Env.describe(Config.option(config), variable)

export const HostIdSetting = optional(Config.String("SVC_HOST_ID"), {
  name: "SVC_HOST_ID",
  default: "derived from the hostname",
  format: "host id"
})
export const Region = Env.text("SVC_REGION", DEFAULT_REGION, "name")
export const Datacenter = Env.text("SVC_DATACENTER", DEFAULT_DATACENTER, "name")
export const HostCpu = optional(Config.Int("SVC_HOST_CPU"), {
  name: "SVC_HOST_CPU",
  default: "the machine's cores",
  format: "integer"
})
export const HostRamMb = optional(Config.Int("SVC_HOST_RAM_MB"), {
  name: "SVC_HOST_RAM_MB",
  default: "the machine's memory",
  format: "integer"
})
export const HostDiskGb = optional(Config.Int("SVC_HOST_DISK_GB"), {
  name: "SVC_HOST_DISK_GB",
  default: "90% of the data dir's free space plus what its sandbox disks hold",
  format: "integer"
})
export const CpuOvercommit = Env.number("SVC_HOST_CPU_OVERCOMMIT", DEFAULT_CPU_OVERCOMMIT, { min: 0 })
export const AllowUnlimited = Env.flag("SVC_AGENT_ALLOW_UNLIMITED")
export const AgentPort = Env.describe(Config.Int("SVC_AGENT_PORT").pipe(Config.withDefault(0)), {
  name: "SVC_AGENT_PORT",
  default: "`0` (any free port)",
  format: "port"
})
export const AgentHost = Env.text("SVC_AGENT_HOST", DEFAULT_LISTEN_HOST, "address")
export const AdvertiseHost = optional(Config.String("SVC_AGENT_ADVERTISE_HOST"), {
  name: "SVC_AGENT_ADVERTISE_HOST",
  default: "the bind address (`127.0.0.1` for `0.0.0.0`)",
  format: "address"
})
export const DataRoot = Env.describe(Config.String("SVC_DATA_DIR").pipe(Config.withDefault(DEFAULT_DATA_ROOT)), {
  name: "SVC_DATA_DIR",
  default: "`.svc/data` of the working directory (svc dev: `<SVC_STATE_DIR>/data`)",
  format: "path"
})
export const AgentDataDir = optional(Config.String("SVC_AGENT_DATA_DIR"), {
  name: "SVC_AGENT_DATA_DIR",
  default: "`<SVC_DATA_DIR>/hosts/<host id>`",
  format: "path"
})
export const Heartbeat = Env.duration("SVC_AGENT_HEARTBEAT", Duration.millis(HOST_HEARTBEAT_MS), {
  formerly: "SVC_AGENT_HEARTBEAT_MS"
})
export const Concurrency = Env.integer("SVC_AGENT_CONCURRENCY", DEFAULT_CONCURRENCY, { min: 0 })
export const PoolSize = Env.integer("SVC_AGENT_POOL_SIZE", DEFAULT_POOL_SIZE, { min: 0 })
export const MaxTransfers = Env.integer("SVC_AGENT_MAX_TRANSFERS", DEFAULT_MAX_TRANSFERS, { min: 0 })
export const MaxTransfersPerOrg = Env.integer("SVC_AGENT_MAX_TRANSFERS_PER_ORG", DEFAULT_MAX_TRANSFERS_PER_ORG, {
  min: 1
})
export const TransferIdleTimeout = Env.duration(
  "SVC_AGENT_TRANSFER_IDLE_TIMEOUT",
  Duration.millis(DEFAULT_TRANSFER_IDLE_MS),
  {
    min: Duration.millis(100),
    max: Duration.hours(1)
  }
)
export const Bridge = Env.text("SVC_SANDBOX_BRIDGE", DEFAULT_BRIDGE, "interface name")
export const Subnet = Env.text("SVC_SANDBOX_SUBNET", DEFAULT_SUBNET, "CIDR")
export const UidBase = Env.integer("SVC_SANDBOX_UID_BASE", DEFAULT_UID_BASE, { min: 0 })
export const UidSlots = Env.integer("SVC_SANDBOX_UID_SLOTS", DEFAULT_UID_SLOTS, { min: 1 })
export const AllowNoFirewall = Env.flag("SVC_AGENT_ALLOW_NO_FIREWALL")
export const SharedVolumesDir = optional(Config.String("SVC_SHARED_VOLUMES_DIR"), {
  name: "SVC_SHARED_VOLUMES_DIR",
  default: "`<SVC_DATA_DIR>/shared-volumes` (one folder for every agent of a machine)",
  format: "path"
})
export const MetricsInterval = Env.duration("SVC_AGENT_METRICS_INTERVAL", Duration.millis(METRICS_INTERVAL_MS), {
  min: Duration.millis(100),
  max: Duration.hours(1)
})
export const ImageCacheDir = optional(Config.String("SVC_IMAGE_CACHE_DIR"), {
  name: "SVC_IMAGE_CACHE_DIR",
  default: "`<agent data dir>/cache`",
  format: "path"
})

/** Every variable the agent role reads: its own, the bus's and the keys. */
export const settings: ReadonlyArray<Env.AnySetting> = [
  ...Bus.settings,
  ...Crypto.settings,
  ...Egress.settings,
  HostIdSetting,
  Region,
  Datacenter,
  HostCpu,
  HostRamMb,
  HostDiskGb,
  CpuOvercommit,
  AllowUnlimited,
  AgentPort,
  AgentHost,
  AdvertiseHost,
  DataRoot,
  AgentDataDir,
  Heartbeat,
  Concurrency,
  PoolSize,
  MaxTransfers,
  MaxTransfersPerOrg,
  TransferIdleTimeout,
  Bridge,
  Subnet,
  UidBase,
  UidSlots,
  AllowNoFirewall,
  SharedVolumesDir,
  ImageCacheDir,
  MetricsInterval,
  ...Oci.settings,
  ...Telemetry.settings
]

export class AgentConfig extends Context.Service<AgentConfig, AgentSettings>()("@svc/agent/AgentConfig") {
  /** Fills in defaults and checks every field (the host id must be a `host_` id). */
  static readonly make = (options: AgentOptions = {}): Effect.Effect<AgentSettings, InvalidAgentConfig> => {
    const hostId = options.hostId ?? hostIdFromHostname(Os.hostname())
    const dataDir = options.dataDir ?? dataDirUnder(DEFAULT_DATA_ROOT, hostId)
    const listenHost = options.listenHost ?? DEFAULT_LISTEN_HOST
    const cores = options.capacity?.cpu ?? Os.availableParallelism()
    const cpuOvercommit = options.cpuOvercommit ?? DEFAULT_CPU_OVERCOMMIT
    const settings = {
      hostId,
      region: options.region ?? DEFAULT_REGION,
      datacenter: options.datacenter ?? DEFAULT_DATACENTER,
      version: options.version ?? Bus.DEFAULT_VERSION,
      capacity: {
        cpu: Math.floor(cores * cpuOvercommit),
        ramMb: options.capacity?.ramMb ?? Math.floor(Os.totalmem() / 1024 ** 2),
        diskGb: options.capacity?.diskGb ?? diskGbOf(dataDir)
      },
      cpuOvercommit,
      allowUnlimited: options.allowUnlimited ?? false,
      exitCheckMs: options.exitCheckMs ?? EXIT_CHECK_MS,
      metricsIntervalMs: options.metricsIntervalMs ?? METRICS_INTERVAL_MS,
      port: options.port ?? 0,
      listenHost,
      advertiseHost: options.advertiseHost ??
        (listenHost === "0.0.0.0" || listenHost === "::" ? "127.0.0.1" : listenHost),
      dataDir,
      heartbeatMs: options.heartbeatMs ?? HOST_HEARTBEAT_MS,
      concurrency: options.concurrency ?? DEFAULT_CONCURRENCY,
      // Off unless asked for: tests count the host's processes and devices. The environment's
      // default (`fromEnv`) is DEFAULT_POOL_SIZE.
      poolSize: options.poolSize ?? 0,
      maxTransfers: options.maxTransfers ?? DEFAULT_MAX_TRANSFERS,
      maxTransfersPerOrg: options.maxTransfersPerOrg ?? DEFAULT_MAX_TRANSFERS_PER_ORG,
      transferIdleMs: options.transferIdleMs ?? DEFAULT_TRANSFER_IDLE_MS,
      bridge: options.bridge ?? DEFAULT_BRIDGE,
      subnet: options.subnet ?? DEFAULT_SUBNET,
      uidBase: options.uidBase ?? DEFAULT_UID_BASE,
      uidSlots: options.uidSlots ?? DEFAULT_UID_SLOTS,
      allowNoFirewall: options.allowNoFirewall ?? false,
      sharedVolumesDir: NodePath.resolve(options.sharedVolumesDir ?? NodePath.join(dataDir, "shared-volumes")),
      ...(options.cgroupRoot !== undefined ? { cgroupRoot: options.cgroupRoot } : {}),
      ...(options.imageCacheDir !== undefined ? { imageCacheDir: options.imageCacheDir } : {}),
      ...(options.egress !== undefined
        ? {
          egress: {
            defaultAction: options.egress.defaultAction ?? "allow",
            allowedSubnets: options.egress.allowedSubnets ?? [],
            hostsFile: options.egress.hostsFile ?? "",
            upstreamCaFile: options.egress.upstreamCaFile ?? "",
            tcpPort: options.egress.tcpPort ?? Egress.DEFAULT_EGRESS_PORT,
            dnsPort: options.egress.dnsPort ?? Egress.DEFAULT_EGRESS_DNS_PORT,
            maxConnectionsPerSandbox: options.egress.maxConnectionsPerSandbox ??
              Egress.DEFAULT_MAX_CONNECTIONS_PER_SANDBOX,
            maxConnections: options.egress.maxConnections ?? Egress.DEFAULT_MAX_CONNECTIONS,
            idleTimeoutSeconds: options.egress.idleTimeoutSeconds ?? Egress.DEFAULT_IDLE_TIMEOUT_SECONDS
          }
        }
        : {})
    }
    return Schema.decodeUnknownEffect(SettingsSchema)(settings).pipe(
      Effect.mapError((e) => new InvalidAgentConfig({ message: e.message }))
    )
  }

  static readonly layer = (options: AgentOptions = {}) => Layer.effect(AgentConfig, AgentConfig.make(options))

  /** From the environment (the settings above). */
  static readonly fromEnv = Layer.effect(
    AgentConfig,
    Effect.gen(function*() {
      const env = yield* Config.all({
        hostId: HostIdSetting,
        region: Region,
        datacenter: Datacenter,
        version: Bus.PlatformVersion,
        cpu: HostCpu,
        ramMb: HostRamMb,
        diskGb: HostDiskGb,
        cpuOvercommit: CpuOvercommit,
        allowUnlimited: AllowUnlimited,
        port: AgentPort,
        listenHost: AgentHost,
        advertiseHost: AdvertiseHost,
        dataRoot: DataRoot,
        dataDir: AgentDataDir,
        heartbeat: Heartbeat,
        concurrency: Concurrency,
        poolSize: PoolSize,
        maxTransfers: MaxTransfers,
        maxTransfersPerOrg: MaxTransfersPerOrg,
        transferIdle: TransferIdleTimeout,
        bridge: Bridge,
        subnet: Subnet,
        uidBase: UidBase,
        uidSlots: UidSlots,
        allowNoFirewall: AllowNoFirewall,
        sharedVolumesDir: SharedVolumesDir,
        imageCacheDir: ImageCacheDir,
        egress: Egress.EgressConfig,
        metricsInterval: MetricsInterval
      }).pipe(Effect.mapError((e) => new InvalidAgentConfig({ message: String(e) })))
      const hostId = Option.getOrElse(env.hostId, () => hostIdFromHostname(Os.hostname()))
      const given = <K extends string, V>(key: K, value: Option.Option<V>) =>
        (Option.isSome(value) ? { [key]: value.value } : {}) as Partial<Record<K, V>>
      return yield* AgentConfig.make({
        hostId,
        region: env.region,
        datacenter: env.datacenter,
        version: env.version,
        port: env.port,
        listenHost: env.listenHost,
        ...given("advertiseHost", env.advertiseHost),
        dataDir: Option.match(env.dataDir, {
          onNone: () => dataDirUnder(env.dataRoot, hostId),
          onSome: (dir) => NodePath.resolve(dir)
        }),
        heartbeatMs: Duration.toMillis(env.heartbeat),
        concurrency: env.concurrency,
        cpuOvercommit: env.cpuOvercommit,
        allowUnlimited: env.allowUnlimited,
        poolSize: env.poolSize,
        maxTransfers: env.maxTransfers,
        maxTransfersPerOrg: env.maxTransfersPerOrg,
        transferIdleMs: Duration.toMillis(env.transferIdle),
        bridge: env.bridge,
        subnet: env.subnet,
        uidBase: env.uidBase,
        uidSlots: env.uidSlots,
        allowNoFirewall: env.allowNoFirewall,
        sharedVolumesDir: Option.getOrElse(env.sharedVolumesDir, () => NodePath.join(env.dataRoot, "shared-volumes")),
        ...Option.match(env.imageCacheDir, {
          onNone: () => ({}),
          onSome: (dir) => ({ imageCacheDir: NodePath.resolve(dir) })
        }),
        egress: env.egress,
        metricsIntervalMs: Duration.toMillis(env.metricsInterval),
        capacity: { ...given("cpu", env.cpu), ...given("ramMb", env.ramMb), ...given("diskGb", env.diskGb) }
      })
    })
  )
}
