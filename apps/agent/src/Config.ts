/**
 * Configuration of one host agent, from the environment (`AgentConfig.fromEnv`) or given
 * field by field (`AgentConfig.layer`, for tests that run several agents in one process).
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
 *   SVC_AGENT_DATA_DIR    the driver's data dir of this host; default
 *                         `<SVC_DATA_DIR or <repo>/.svc/data>/hosts/<hostId>`
 *   SVC_AGENT_HEARTBEAT_MS   default HOST_HEARTBEAT_MS
 *   SVC_AGENT_CONCURRENCY    commands applied at once (one sandbox's commands stay in order)
 *   SVC_AGENT_POOL_SIZE      pre-started `base` sandboxes kept ready (default 4; 0 turns the pool off)
 *   SVC_AGENT_MAX_TRANSFERS  file uploads and downloads streamed at once (default 32); more wait
 *   SVC_SANDBOX_BRIDGE / SVC_SANDBOX_SUBNET   passed to the driver (machine-wide settings)
 *   SVC_AGENT_ALLOW_NO_FIREWALL   1: start even when the sandbox firewall cannot be installed
 *   SVC_VERSION           reported in the host record
 */
import { HostId } from "@svc/domain/Ids"
import { imagesAllocatedBytes } from "@svc/host/Driver/Disk"
import { type Capacity, HOST_HEARTBEAT_MS } from "@svc/host-protocol/Protocol"
import { Config, Context, Effect, Layer, Option, Schema } from "effect"
import { createHash } from "node:crypto"
import * as FsSync from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"

export const AGENT_VERSION = "0.1.0"

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
  readonly bridge?: string
  readonly subnet?: string
  /** Start even when the sandbox firewall (nftables) cannot be installed. */
  readonly allowNoFirewall: boolean
  /** The cgroup file system the driver uses (default `/sys/fs/cgroup`). */
  readonly cgroupRoot?: string
}

/**
 * What a caller may set; everything else takes its default. `capacity.cpu` is the host's cores
 * (as `SVC_HOST_CPU`): the capacity offered multiplies it by `cpuOvercommit`.
 */
export type AgentOptions = Partial<Omit<AgentSettings, "capacity">> & { readonly capacity?: Partial<Capacity> }

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

/** The repository's `.svc/data` (this file is <repo>/apps/agent/src/Config.ts). */
const defaultDataRoot = (): string => {
  const fromEnv = process.env["SVC_DATA_DIR"]
  if (fromEnv !== undefined && fromEnv !== "") return NodePath.resolve(fromEnv)
  return NodePath.resolve(NodePath.dirname(fileURLToPath(import.meta.url)), "../../..", ".svc", "data")
}

export const defaultDataDir = (hostId: string) => NodePath.join(defaultDataRoot(), "hosts", hostId)

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
  port: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0), Schema.isLessThanOrEqualTo(65_535)),
  listenHost: Schema.String.check(Schema.isMinLength(1)),
  advertiseHost: Schema.String.check(Schema.isMinLength(1)),
  dataDir: Schema.String.check(Schema.isPattern(/^\/[^\0,:\s]*$/, { message: "absolute path without ',', ':' or spaces" })),
  heartbeatMs: Schema.Int.check(Schema.isGreaterThanOrEqualTo(50), Schema.isLessThanOrEqualTo(60_000)),
  concurrency: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1), Schema.isLessThanOrEqualTo(256)),
  poolSize: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0), Schema.isLessThanOrEqualTo(64)),
  maxTransfers: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1), Schema.isLessThanOrEqualTo(4096)),
  bridge: Schema.optionalKey(Schema.String),
  subnet: Schema.optionalKey(Schema.String),
  allowNoFirewall: Schema.Boolean,
  cgroupRoot: Schema.optionalKey(Schema.String.check(Schema.isPattern(/^\/[^\0]*$/, { message: "absolute path" })))
})

/** `SVC_AGENT_POOL_SIZE` when unset. */
export const DEFAULT_POOL_SIZE = 4

/** `SVC_HOST_CPU_OVERCOMMIT` when unset. */
export const DEFAULT_CPU_OVERCOMMIT = 8

/** Running sandboxes are checked this often for an init that died (two /proc reads each). */
export const EXIT_CHECK_MS = 500

/** `1`/`true` or `0`/`false` (unset: false); anything else is refused rather than guessed. */
const parseFlag = (name: string, value: string | undefined): Effect.Effect<boolean, InvalidAgentConfig> => {
  if (value === undefined || value === "" || value === "0" || value === "false") return Effect.succeed(false)
  if (value === "1" || value === "true") return Effect.succeed(true)
  return Effect.fail(new InvalidAgentConfig({ message: `${name}: 1 or 0 (true or false), got ${JSON.stringify(value).slice(0, 40)}` }))
}

/**
 * `SVC_AGENT_MAX_TRANSFERS` when unset. A transfer in flight holds a few hundred KiB of buffers
 * in the agent and one writer or reader process chain in the sandbox.
 */
export const DEFAULT_MAX_TRANSFERS = 32

export class AgentConfig extends Context.Service<AgentConfig, AgentSettings>()("@svc/agent/AgentConfig") {
  /** Fills in defaults and checks every field (the host id must be a `host_` id). */
  static readonly make = (options: AgentOptions = {}): Effect.Effect<AgentSettings, InvalidAgentConfig> => {
    const hostId = options.hostId ?? hostIdFromHostname(Os.hostname())
    const dataDir = options.dataDir ?? defaultDataDir(hostId)
    const listenHost = options.listenHost ?? "127.0.0.1"
    const cores = options.capacity?.cpu ?? Os.availableParallelism()
    const cpuOvercommit = options.cpuOvercommit ?? DEFAULT_CPU_OVERCOMMIT
    const settings = {
      hostId,
      region: options.region ?? "local",
      datacenter: options.datacenter ?? "local-1",
      version: options.version ?? AGENT_VERSION,
      capacity: {
        cpu: Math.floor(cores * cpuOvercommit),
        ramMb: options.capacity?.ramMb ?? Math.floor(Os.totalmem() / 1024 ** 2),
        diskGb: options.capacity?.diskGb ?? diskGbOf(dataDir)
      },
      cpuOvercommit,
      allowUnlimited: options.allowUnlimited ?? false,
      exitCheckMs: options.exitCheckMs ?? EXIT_CHECK_MS,
      port: options.port ?? 0,
      listenHost,
      advertiseHost: options.advertiseHost ?? (listenHost === "0.0.0.0" || listenHost === "::" ? "127.0.0.1" : listenHost),
      dataDir,
      heartbeatMs: options.heartbeatMs ?? HOST_HEARTBEAT_MS,
      concurrency: options.concurrency ?? 4,
      // Off unless asked for: tests count the host's processes and devices. The environment's
      // default (`fromEnv`) is DEFAULT_POOL_SIZE.
      poolSize: options.poolSize ?? 0,
      maxTransfers: options.maxTransfers ?? DEFAULT_MAX_TRANSFERS,
      ...(options.bridge !== undefined ? { bridge: options.bridge } : {}),
      ...(options.subnet !== undefined ? { subnet: options.subnet } : {}),
      allowNoFirewall: options.allowNoFirewall ?? false,
      ...(options.cgroupRoot !== undefined ? { cgroupRoot: options.cgroupRoot } : {})
    }
    return Schema.decodeUnknownEffect(SettingsSchema)(settings).pipe(
      Effect.mapError((e) => new InvalidAgentConfig({ message: e.message }))
    )
  }

  static readonly layer = (options: AgentOptions = {}) => Layer.effect(AgentConfig, AgentConfig.make(options))

  /** From the environment (see the module comment). */
  static readonly fromEnv = Layer.effect(
    AgentConfig,
    Effect.gen(function*() {
      const opt = <A>(config: Config.Config<A>) =>
        Effect.gen(function*() {
          return Option.getOrUndefined(yield* Config.option(config))
        })
      const env = yield* Effect.all({
        hostId: opt(Config.String("SVC_HOST_ID")),
        region: opt(Config.String("SVC_REGION")),
        datacenter: opt(Config.String("SVC_DATACENTER")),
        version: opt(Config.String("SVC_VERSION")),
        cpu: opt(Config.Int("SVC_HOST_CPU")),
        ramMb: opt(Config.Int("SVC_HOST_RAM_MB")),
        diskGb: opt(Config.Int("SVC_HOST_DISK_GB")),
        cpuOvercommit: opt(Config.Number("SVC_HOST_CPU_OVERCOMMIT")),
        allowUnlimited: opt(Config.String("SVC_AGENT_ALLOW_UNLIMITED")),
        port: opt(Config.Int("SVC_AGENT_PORT")),
        listenHost: opt(Config.String("SVC_AGENT_HOST")),
        advertiseHost: opt(Config.String("SVC_AGENT_ADVERTISE_HOST")),
        dataDir: opt(Config.String("SVC_AGENT_DATA_DIR")),
        heartbeatMs: opt(Config.Int("SVC_AGENT_HEARTBEAT_MS")),
        concurrency: opt(Config.Int("SVC_AGENT_CONCURRENCY")),
        poolSize: opt(Config.Int("SVC_AGENT_POOL_SIZE")),
        maxTransfers: opt(Config.Int("SVC_AGENT_MAX_TRANSFERS")),
        bridge: opt(Config.String("SVC_SANDBOX_BRIDGE")),
        subnet: opt(Config.String("SVC_SANDBOX_SUBNET")),
        allowNoFirewall: opt(Config.Boolean("SVC_AGENT_ALLOW_NO_FIREWALL"))
      }).pipe(Effect.mapError((e) => new InvalidAgentConfig({ message: String(e) })))
      const defined = <K extends string, V>(key: K, value: V | undefined) =>
        (value === undefined || value === "" ? {} : { [key]: value }) as Partial<Record<K, V>>
      const capacity = {
        ...defined("cpu", env.cpu),
        ...defined("ramMb", env.ramMb),
        ...defined("diskGb", env.diskGb)
      }
      return yield* AgentConfig.make({
        ...defined("hostId", env.hostId),
        ...defined("region", env.region),
        ...defined("datacenter", env.datacenter),
        ...defined("version", env.version),
        ...defined("port", env.port),
        ...defined("listenHost", env.listenHost),
        ...defined("advertiseHost", env.advertiseHost),
        ...defined("dataDir", env.dataDir !== undefined && env.dataDir !== "" ? NodePath.resolve(env.dataDir) : undefined),
        ...defined("heartbeatMs", env.heartbeatMs),
        ...defined("concurrency", env.concurrency),
        ...defined("cpuOvercommit", env.cpuOvercommit),
        allowUnlimited: yield* parseFlag("SVC_AGENT_ALLOW_UNLIMITED", env.allowUnlimited),
        poolSize: env.poolSize ?? DEFAULT_POOL_SIZE,
        ...defined("maxTransfers", env.maxTransfers),
        ...defined("bridge", env.bridge),
        ...defined("subnet", env.subnet),
        ...defined("allowNoFirewall", env.allowNoFirewall),
        capacity
      })
    })
  )
}
