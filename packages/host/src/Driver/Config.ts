/**
 * Configuration of the namespaces driver on one host agent. Several agents may run on one
 * machine: each has its own `dataDir` and `hostId`; they share the bridge and its address
 * space, whose leases live in one machine-wide `leaseDir`.
 *
 * The driver reads no environment: its caller gives the data dir and host id, and whatever it
 * sets from its own settings (the agent: `SVC_SANDBOX_BRIDGE`, `SVC_SANDBOX_SUBNET`,
 * `SVC_SANDBOX_UID_BASE`, in apps/agent/src/Config.ts); the rest takes the defaults below.
 */
import { Context, Effect, Layer, Schema } from "effect"

/** What a caller gives: the data dir and host id always, any other field to replace its default. */
export type DriverOptions = Partial<DriverConfig["Service"]> & { readonly dataDir: string; readonly hostId: string }

export class DriverConfig extends Context.Service<DriverConfig, {
  /** Holds templates/ and sandboxes/ of this agent. */
  readonly dataDir: string
  /** Names this agent's cgroups; distinct per agent on one machine. */
  readonly hostId: string
  /** The Linux bridge every sandbox's veth is attached to (created if absent). */
  readonly bridge: string
  /** IPv4 network of the bridge, e.g. 10.213.0.0/16; the host takes the first address. */
  readonly subnet: string
  /** Machine-wide folder of IP leases (one file per address), shared by all agents on the bridge. */
  readonly leaseDir: string
  /**
   * Machine-wide folder (a tmpfs) holding, per data dir, the sandboxes' mount points and the helper:
   * what unprivileged bubblewrap must walk to, wherever the data dir is (a 0700 home included).
   */
  readonly runDir: string
  /** Root of the cgroup file system: v1's per-controller hierarchies or the v2 unified one (detected). */
  readonly cgroupRoot: string
  /** Most processes one sandbox may have (pids controller). */
  readonly pidsMax: number
  /**
   * Most open descriptors of each process of a sandbox (RLIMIT_NOFILE, soft and hard: root inside
   * cannot raise it). docs/security.md "Resource limits" gives the arithmetic.
   */
  readonly nofile: number
  /**
   * Most processes of all sandboxes of the machine together (`pids.max` of the machine-wide
   * `svc-sandboxes` cgroup). Unset: the host's pid_max (or threads-max, the lower) less a
   * quarter of it, at least 4096, for the host's own (`Cgroups.sandboxesPidsCap`).
   */
  readonly sandboxesPidsMax?: number
  /** A static busybox from the host, bind-mounted read-only into every sandbox as its helper. */
  readonly busybox: string
  /**
   * First host uid (and gid) of the range that owns the sandboxes' files: uid 0..65535 inside is
   * this..+65535 on disk. The running sandboxes are `uidSlots` ranges of 65536 above it, one
   * each (`Confinement.slotUid`). None may overlap a host user or subordinate range (`/etc/subuid`).
   */
  readonly uidBase: number
  /** How many sandboxes may run at once on this machine, each as a uid range of its own (default 4096). */
  readonly uidSlots: number
  /**
   * Machine-wide folder of uid range leases (one file per slot), shared by every agent with this
   * `uidBase`: `<runDir>/uid-slots-<uidBase>` unless given.
   */
  readonly slotDir: string
  /**
   * Start even when the sandbox firewall cannot be installed (no `nft`, or it fails): sandboxes
   * then reach this host's services. Off by default (`SVC_AGENT_ALLOW_NO_FIREWALL=1` in the agent).
   */
  readonly allowNoFirewall: boolean
  /** Blank 1 GiB disk images kept formatted ahead of creates (`Disk.ts`); 0 formats at each create. */
  readonly diskStock: number
  /**
   * Egress through the host (@svc/egress): the firewall redirects the sandboxes' TCP and DNS to
   * these gateway ports and each sandbox gets a default route to the gateway. Machine-wide, like
   * the bridge. Unset: a sandbox reaches nothing beyond itself.
   */
  readonly egress?: { readonly tcpPort: number; readonly dnsPort: number }
  /**
   * A CA certificate (PEM) added to the `base` template's trust store
   * (`/etc/ssl/certs/ca-certificates.crt`): the egress proxy's own CA, so that clients inside
   * trust the certificates it presents where it writes a secret into HTTPS requests.
   */
  readonly trustedCaPem?: string
  /**
   * Where built image roots are cached (the `debian` archive, `Debian.ts`): shareable by every
   * agent of a machine. Default `<dataDir>/cache`.
   */
  readonly imageCacheDir?: string
  /**
   * Where shared volumes live on this machine (`Volumes.ts`): their images and the one mount of
   * each, which every agent of the machine uses. Machine-wide: the agents of one machine must
   * give the same folder. Default `<dataDir>/shared-volumes` (a driver alone on its machine).
   */
  readonly sharedVolumesDir: string
}>()("@svc/host/Driver/DriverConfig") {
  static readonly make = (options: DriverOptions): DriverConfig["Service"] => {
    const bridge = options.bridge ?? DEFAULT_BRIDGE
    const config = {
      dataDir: options.dataDir,
      hostId: options.hostId,
      bridge,
      subnet: options.subnet ?? DEFAULT_SUBNET,
      leaseDir: options.leaseDir ?? `/run/svc-sandboxes/${bridge}/leases`,
      runDir: options.runDir ?? "/run/svc-sandboxes",
      cgroupRoot: options.cgroupRoot ?? "/sys/fs/cgroup",
      pidsMax: options.pidsMax ?? 1024,
      nofile: options.nofile ?? 4096,
      busybox: options.busybox ?? "/bin/busybox",
      uidBase: options.uidBase ?? DEFAULT_UID_BASE,
      uidSlots: options.uidSlots ?? DEFAULT_UID_SLOTS,
      slotDir: options.slotDir ??
        `${(options.runDir ?? "/run/svc-sandboxes").replace(/\/+$/, "")}/uid-slots-${
          options.uidBase ?? DEFAULT_UID_BASE
        }`,
      allowNoFirewall: options.allowNoFirewall ?? false,
      diskStock: options.diskStock ?? 4,
      sharedVolumesDir: options.sharedVolumesDir ?? `${options.dataDir.replace(/\/+$/, "")}/shared-volumes`,
      ...(options.egress !== undefined ? { egress: options.egress } : {}),
      ...(options.trustedCaPem !== undefined ? { trustedCaPem: options.trustedCaPem } : {}),
      ...(options.imageCacheDir !== undefined ? { imageCacheDir: options.imageCacheDir } : {}),
      ...(options.sandboxesPidsMax !== undefined ? { sandboxesPidsMax: options.sandboxesPidsMax } : {})
    }
    return Schema.decodeSync(ConfigSchema)(config)
  }

  /** The data dir and host id given, defaults for what is not. */
  static readonly layer = (options: DriverOptions) =>
    Layer.effect(DriverConfig, Effect.sync(() => DriverConfig.make(options)))
}

const Name = Schema.String.check(
  Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$/, { message: "name: 1 to 32 of [A-Za-z0-9_-]" })
)
const Port = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 65_535 }))
const AbsolutePath = Schema.String.check(Schema.isPattern(/^\/[^\0]*$/, { message: "absolute path" }))

/** Above the system and login ranges and the usual /etc/subuid blocks, below 2^31. */
export const UidBase = Schema.Int.check(Schema.isBetween({ minimum: 65536, maximum: 2 ** 31 - 65536 }))

/** At most the ranges of 65536 between the highest base and the top of the uid space (`Confinement.slotsOverflow`). */
export const UidSlots = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 32_767 }))

const ConfigSchema = Schema.Struct({
  dataDir: AbsolutePath,
  hostId: Name,
  // Interface names are at most 15 bytes.
  bridge: Schema.String.check(
    Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9_-]{0,14}$/, { message: "bridge: 1 to 15 of [A-Za-z0-9_-]" })
  ),
  subnet: Schema.String.check(
    Schema.isPattern(/^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\/(1[6-9]|2[0-8])$/, {
      message: "subnet: IPv4 CIDR, /16 to /28"
    })
  ),
  leaseDir: AbsolutePath,
  runDir: AbsolutePath,
  cgroupRoot: AbsolutePath,
  pidsMax: Schema.Int.check(Schema.isGreaterThanOrEqualTo(16)),
  nofile: Schema.Int.check(Schema.isBetween({ minimum: 64, maximum: 1_048_576 })),
  sandboxesPidsMax: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThanOrEqualTo(16))),
  busybox: AbsolutePath,
  uidBase: UidBase,
  uidSlots: UidSlots,
  slotDir: AbsolutePath,
  allowNoFirewall: Schema.Boolean,
  diskStock: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 64 })),
  sharedVolumesDir: AbsolutePath,
  egress: Schema.optionalKey(Schema.Struct({ tcpPort: Port, dnsPort: Port })),
  trustedCaPem: Schema.optionalKey(
    Schema.String.check(Schema.isPattern(/^-----BEGIN CERTIFICATE-----/, { message: "a PEM certificate" }))
  ),
  imageCacheDir: Schema.optionalKey(AbsolutePath)
})

/** 0x7FFF0000: far from login users (1000+), subuid blocks (100000 + 65536·n) and systemd-nspawn's ranges. */
export const DEFAULT_UID_BASE = 0x7fff0000

/** 4096 ranges of 65536 above the files' range: 0x80000000..0x8FFFFFFF with the default base. */
export const DEFAULT_UID_SLOTS = 4096

export const DEFAULT_BRIDGE = "svcbr0"
export const DEFAULT_SUBNET = "10.213.0.0/16"
