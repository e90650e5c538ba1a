/**
 * What every part of the namespaces driver shares on one host: the host programs it runs, its
 * folders, the bridge's subnet, the per-sandbox locks, the cache of running sandboxes and the
 * lookups built on them. `makeDriverHost` prepares the host once, when the driver starts: the
 * helper busybox, the base template, the bridge and its firewall (`Firewall.ts`).
 */
import type { SecretBox } from "@svc/crypto/SecretBox"
import { Effect, Schema, type Scope, Semaphore } from "effect"
import { createHash } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import {
  DriverFailure,
  DriverSandboxId,
  InvalidSandboxRequest,
  SandboxNotFound,
  SandboxNotRunning,
  TemplateNotFound
} from "../Driver.ts"
import { BASE_TEMPLATE, ensureBaseTemplate } from "../Rootfs.ts"
import * as Cgroups from "./Cgroups.ts"
import type { DriverConfig } from "./Config.ts"
import * as Confinement from "./Confinement.ts"
import * as Disk from "./Disk.ts"
import { installFirewall } from "./Firewall.ts"
import * as Network from "./Network.ts"
import { decode, run, runChecked } from "./Process.ts"
import * as Seccomp from "./Seccomp.ts"
import * as Spawner from "./Spawner.ts"
import {
  isAlive,
  readRunRecord,
  readSandboxRecord,
  type RunRecord,
  type SandboxPaths,
  sandboxPaths,
  type SandboxRecord,
  sealLegacyRecord
} from "./State.ts"
import * as Volumes from "./Volumes.ts"

/**
 * Where the host's static busybox appears inside every sandbox. The folder itself is a read-only
 * bind mount: a mount point cannot be renamed or replaced from inside, so root in the sandbox
 * cannot swap the helper the agent runs on its next exec.
 */
export const HELPER_DIR = "/dev/.svc"
export const HELPER = `${HELPER_DIR}/busybox`
/** A sandbox's pid 1 (`native/svc-init.c`), beside the helper. */
export const INIT = `${HELPER_DIR}/svc-init`

/** Host commands run with this environment only: nothing of the caller's leaks in. */
export const HOST_ENV = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" }

export const SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

export const errorMessage = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** A host step (file, kernel) as an effect: whatever it throws is the host's failure. */
export const tryHost = <A>(operation: string, f: () => Promise<A>): Effect.Effect<A, DriverFailure> =>
  Effect.tryPromise({ try: f, catch: (e) => new DriverFailure({ operation, message: errorMessage(e) }) })

/**
 * A spawner request that starts no program (`Spawner.veth`, `Spawner.adoptInside`) as a driver
 * step: interrupted or past `timeoutMs`, the spawner's child doing it is killed.
 */
export const spawnerTask = (
  operation: string,
  f: (signal: AbortSignal) => Promise<void>,
  timeoutMs = 30_000
): Effect.Effect<void, DriverFailure> =>
  Effect.tryPromise({ try: f, catch: (e) => new DriverFailure({ operation, message: errorMessage(e) }) }).pipe(
    Effect.timeoutOrElse({
      duration: timeoutMs,
      orElse: () => Effect.fail(new DriverFailure({ operation, message: `no answer within ${timeoutMs / 1000} s` }))
    })
  )

export const invalid = (message: string) => new InvalidSandboxRequest({ message })

/** Every caller input goes through its schema: a refusal is the caller's fault, never a host failure. */
export const decodeInput = <S extends Schema.Top>(schema: S, input: unknown) =>
  Schema.decodeUnknownEffect(schema)(input).pipe(
    Effect.mapError((issue) => invalid(String(issue.message ?? issue)))
  ) as Effect.Effect<S["Type"], InvalidSandboxRequest>

export const checkId = (sandboxId: unknown) => decodeInput(DriverSandboxId, sandboxId)

const findBinary = (name: string): string | undefined =>
  ["/usr/bin", "/usr/sbin", "/bin", "/sbin"].map((dir) => NodePath.join(dir, name)).find((path) =>
    FsSync.existsSync(path)
  )

/** A sandbox whose init runs: its record and the record of that run. */
export interface RunningSandbox {
  readonly record: SandboxRecord
  readonly run: RunRecord
}

export interface DriverHost {
  readonly config: DriverConfig["Service"]
  /** Seals and opens the env in `sandbox.json` (`SVC_ENCRYPTION_KEYS`). */
  readonly secrets: SecretBox["Service"]
  /** Absolute paths of the host programs the driver runs (found once, at start). */
  readonly bin: {
    readonly bwrap: string
    readonly unshare: string
    readonly ip: string
    readonly sh: string
  }
  /** The seccomp filter and the `svc-start` and `svc-enter` binaries (see Confinement.ts). */
  readonly confinement: Confinement.ConfinementFiles
  readonly subnet: Network.SandboxSubnet
  /** The sandboxes' cgroups, v1 or v2 as detected at start. */
  readonly cgroups: Cgroups.Cgroups
  /** Whether sandboxes get a disk image (`Disk.ts`), found once at start, and the blank ones made ahead. */
  readonly disk: Disk.DiskSupport
  readonly diskStock: Disk.DiskStock
  /** Volumes' images and mounts on this host (`Volumes.ts`). */
  readonly volumes: Volumes.HostVolumes
  readonly sandboxesDir: string
  /** The host folder bound read-only at `HELPER_DIR` in every sandbox. */
  readonly helperDir: string
  /** Where a sandbox's root is mounted (in its own mount namespace only) and bubblewrap binds it from. */
  mountPoint(sandboxId: string): string
  /**
   * Running sandboxes seen by this process. Only a cache: every use checks the init is still the
   * same process, and the disk stays the truth (a restarted agent starts with it empty).
   */
  readonly running: Map<string, RunningSandbox>
  /** Lifecycle steps of one sandbox run one at a time in this process. */
  withLock<A, E>(sandboxId: string, effect: Effect.Effect<A, E>): Effect.Effect<A, E>
  /** The lease owner of a sandbox of this agent (leases are shared machine-wide). */
  owner(sandboxId: string): { readonly dataDir: string; readonly sandboxId: string }
  /**
   * Leases a uid range's slot for the sandbox machine-wide: `preferred` if it is free or already
   * its own, else the first free one; undefined when every slot is taken.
   */
  leaseSlot(sandboxId: string, preferred: number | undefined): Promise<number | undefined>
  /** Gives the slot back if (and only if) it is still the sandbox's. */
  releaseSlot(sandboxId: string, slot: number | undefined): Promise<void>
  /** The lower folder of a template's overlay. */
  templateDir(template: string): Effect.Effect<string, TemplateNotFound | DriverFailure>
  /** The record with its env opened. */
  loadRecord(
    sandboxId: string
  ): Effect.Effect<{ paths: SandboxPaths; record: SandboxRecord }, SandboxNotFound | DriverFailure>
  /** The running instance, checked against pid reuse on every call. */
  lookupRunning(
    sandboxId: unknown
  ): Effect.Effect<RunningSandbox, InvalidSandboxRequest | SandboxNotFound | SandboxNotRunning | DriverFailure>
}

const readInt = async (file: string) => Number((await Fs.readFile(file, "utf8")).trim())

/**
 * The machine-wide bounds of all sandboxes together (docs/security.md "Resource limits"): their
 * processes (`pids.max` of the `svc-sandboxes` group, below the host's pid_max), and so their
 * open files, each process holding at most `nofile`: fs.file-max is raised (never lowered) to
 * that many plus the kernel's own default for the host (a tenth of its memory in KiB), so that
 * sandboxes together cannot take the files the host's processes and other tenants need.
 */
const limitHost = async (config: DriverConfig["Service"], cgroups: Cgroups.Cgroups) => {
  const pidsMax = config.sandboxesPidsMax ??
    Cgroups.sandboxesPidsCap(await readInt("/proc/sys/kernel/pid_max"), await readInt("/proc/sys/kernel/threads-max"))
  const pids = await cgroups.limitSandboxes(pidsMax)
  const memKb = Number(/^MemTotal:\s+(\d+) kB$/m.exec(await Fs.readFile("/proc/meminfo", "utf8"))?.[1] ?? 0)
  const files = pidsMax * config.nofile + Math.floor(memKb / 10)
  if ((await readInt("/proc/sys/fs/file-max")) < files) await Fs.writeFile("/proc/sys/fs/file-max", String(files))
  return { pidsMax, pids, files }
}

/** Finds the host programs, prepares the data dir, the helper, the base template, the bridge and its firewall. */
export const makeDriverHost = (
  config: DriverConfig["Service"],
  secrets: SecretBox["Service"]
): Effect.Effect<DriverHost, DriverFailure, Scope.Scope> =>
  Effect.gen(function*() {
    const found = {
      bwrap: findBinary("bwrap"),
      unshare: findBinary("unshare"),
      ip: findBinary("ip"),
      sh: findBinary("sh")
    }
    for (const [name, path] of Object.entries(found)) {
      if (path === undefined) {
        return yield* new DriverFailure({ operation: "init", message: `${name} is not installed` })
      }
    }
    const bin = {
      bwrap: found.bwrap!,
      unshare: found.unshare!,
      ip: found.ip!,
      sh: found.sh!
    }
    if (!Seccomp.supportedArch()) {
      return yield* new DriverFailure({
        operation: "init",
        message: `the seccomp filter is written for x86_64, not ${process.arch}`
      })
    }
    if (/[,:\s]/.test(config.dataDir)) {
      return yield* new DriverFailure({
        operation: "init",
        message: "dataDir must not contain ',', ':' or spaces (overlay options)"
      })
    }
    const subnet = Network.parseSubnet(config.subnet)
    const cgroups = Cgroups.make({ root: config.cgroupRoot, hostId: config.hostId })
    const templatesDir = NodePath.join(config.dataDir, "templates")
    const sandboxesDir = NodePath.join(config.dataDir, "sandboxes")

    yield* tryHost("init", () => Fs.mkdir(sandboxesDir, { recursive: true }))
    const overflow = Confinement.slotsOverflow(config.uidBase, config.uidSlots)
    if (overflow !== undefined) {
      return yield* new DriverFailure({ operation: "init", message: `${overflow}: set SVC_SANDBOX_UID_BASE lower` })
    }
    const conflict = yield* tryHost("init", () => Confinement.rangeConflict(config.uidBase, config.uidSlots))
    if (conflict !== undefined) {
      return yield* new DriverFailure({
        operation: "init",
        message: `the sandboxes' uid range ${config.uidBase}+${
          Confinement.slotUid(config.uidBase, config.uidSlots) - config.uidBase
        } is in use (${conflict}): set SVC_SANDBOX_UID_BASE`
      })
    }
    yield* tryHost("init", () => limitHost(config, cgroups))
    const confinement = yield* tryHost("init", () => Confinement.prepare(NodePath.join(config.dataDir, "host")))
    // From here on every host command is started by the spawner, not by a fork of this process.
    yield* Effect.acquireRelease(
      Effect.sync(() => Spawner.use(confinement.spawner)),
      (use) => Effect.sync(use.release)
    )
    // bubblewrap runs as the sandboxes' uid and must walk to each sandbox's root and the helper:
    // both live under a folder of runDir named after the data dir (which may sit in a 0700 home;
    // its own folders stay private to root).
    const walkDir = NodePath.join(
      config.runDir,
      "hosts",
      createHash("sha256").update(config.dataDir).digest("hex").slice(0, 16)
    )
    const mountsDir = NodePath.join(walkDir, "roots")
    yield* tryHost("init", async () => {
      await Fs.mkdir(mountsDir, { recursive: true, mode: 0o711 })
      for (const dir of [walkDir, mountsDir]) await Fs.chmod(dir, 0o711)
    })
    for (let dir = mountsDir;; dir = NodePath.dirname(dir)) {
      const mode = yield* tryHost("init", () => Fs.stat(dir).then((st) => st.mode))
      if ((mode & 0o001) === 0) {
        return yield* new DriverFailure({
          operation: "init",
          message: `${dir} must be traversable by other users (o+x): sandboxes run as uids above ${config.uidBase}`
        })
      }
      if (dir === NodePath.dirname(dir)) break
    }
    // Records from before the env was sealed: sealed now, so no env is left in the clear.
    const names = yield* tryHost("init", () => Fs.readdir(sandboxesDir))
    for (const name of names) {
      if (Schema.is(DriverSandboxId)(name)) yield* sealLegacyRecord(sandboxPaths(config.dataDir, name), secrets)
    }
    const helperDir = NodePath.join(walkDir, "helper")
    yield* tryHost("init", async () => {
      await Fs.mkdir(helperDir, { recursive: true, mode: 0o755 })
      const target = NodePath.join(helperDir, "busybox")
      const [have, want] = await Promise.all([Fs.stat(target).catch(() => undefined), Fs.stat(config.busybox)])
      if (have === undefined || have.size !== want.size || have.mtimeMs < want.mtimeMs) {
        const temp = `${target}.tmp-${process.pid}`
        await Fs.copyFile(config.busybox, temp)
        await Fs.chmod(temp, 0o755)
        await Fs.rename(temp, target)
      }
      // svc-init, svc-watch and svc-ctx beside busybox (whole files: written aside, renamed).
      for (
        const [name, source] of [
          [NodePath.basename(INIT), confinement.init],
          ["svc-watch", confinement.watch],
          ["svc-ctx", confinement.ctx]
        ]
      ) {
        const target = NodePath.join(helperDir, name!)
        const built = await Fs.readFile(source!)
        if (!built.equals(await Fs.readFile(target).catch(() => Buffer.alloc(0)))) {
          const temp = `${target}.tmp-${process.pid}`
          await Fs.writeFile(temp, built, { mode: 0o755 })
          await Fs.chmod(temp, 0o755)
          await Fs.rename(temp, target)
        }
      }
    })
    const baseDir = yield* tryHost("init", () =>
      ensureBaseTemplate(templatesDir, config.busybox, config.uidBase, {
        ...(config.trustedCaPem !== undefined ? { trustedCaPem: config.trustedCaPem } : {}),
        ...(config.egress !== undefined ? { nameserver: subnet.gateway } : {})
      }))
    const disk = yield* Disk.probe(config.dataDir, bin, HOST_ENV, config.uidBase)
    const diskStock = yield* Disk.makeStock(disk, config.dataDir, config.diskStock, HOST_ENV)
    const volumes = Volumes.makeVolumes(config, disk, bin.sh, HOST_ENV)

    // The bridge is shared by every agent on the machine: create it if absent, never touch others.
    if (!(yield* tryHost("bridge", () => Network.interfaceExists(config.bridge)))) {
      const made = yield* run("bridge", bin.ip, ["link", "add", "name", config.bridge, "type", "bridge"], {
        env: HOST_ENV,
        timeoutMs: 10_000
      })
      if (made.exitCode !== 0 && !/exists/i.test(decode(made.stderr))) {
        return yield* new DriverFailure({ operation: "bridge", message: decode(made.stderr) })
      }
    }
    yield* runChecked(
      "bridge",
      bin.ip,
      ["addr", "replace", `${subnet.gateway}/${subnet.prefix}`, "dev", config.bridge],
      { env: HOST_ENV }
    )
    yield* runChecked("bridge", bin.ip, ["link", "set", config.bridge, "up"], { env: HOST_ENV })
    // Drop packets whose source could not be reached back through the bridge (spoofing).
    yield* tryHost(
      "bridge",
      () => Fs.writeFile(`/proc/sys/net/ipv4/conf/${config.bridge}/rp_filter`, "1").catch(() => undefined)
    )
    // Before any sandbox of this agent starts: none reaches the host, another sandbox or beyond.
    yield* installFirewall({
      nft: findBinary("nft"),
      settings: { bridge: config.bridge, subnet, ...(config.egress !== undefined ? { egress: config.egress } : {}) },
      allowNoFirewall: config.allowNoFirewall
    })

    const locks = new Map<string, Semaphore.Semaphore>()
    const withLock = <A, E>(sandboxId: string, effect: Effect.Effect<A, E>) => {
      let lock = locks.get(sandboxId)
      if (lock === undefined) {
        lock = Semaphore.makeUnsafe(1)
        locks.set(sandboxId, lock)
      }
      return lock.withPermit(effect)
    }

    const templateDir = (template: string): Effect.Effect<string, TemplateNotFound | DriverFailure> => {
      if (template === BASE_TEMPLATE) return Effect.succeed(baseDir)
      const dir = NodePath.join(templatesDir, template)
      return tryHost("template", () => Fs.stat(dir).then((s) => s.isDirectory(), () => false)).pipe(
        Effect.flatMap((ok) => (ok ? Effect.succeed(dir) : Effect.fail(new TemplateNotFound({ template }))))
      )
    }

    const loadRecord = (sandboxId: string) =>
      Effect.gen(function*() {
        const paths = sandboxPaths(config.dataDir, sandboxId)
        const record = yield* readSandboxRecord(paths, secrets, "load")
        if (record === undefined) return yield* new SandboxNotFound({ sandboxId })
        return { paths, record }
      })

    const running = new Map<string, RunningSandbox>()

    const lookupRunning = (sandboxId: unknown) =>
      Effect.gen(function*() {
        const id = yield* checkId(sandboxId)
        const cached = running.get(id)
        if (cached !== undefined && (yield* tryHost("lookup", () => isAlive(cached.run)))) return cached
        running.delete(id)
        const { paths, record } = yield* loadRecord(id)
        const runRecord = yield* tryHost("lookup", () => readRunRecord(paths))
        if (runRecord === undefined || !(yield* tryHost("lookup", () => isAlive(runRecord)))) {
          return yield* new SandboxNotRunning({ sandboxId: id })
        }
        const entry = { record, run: runRecord }
        running.set(id, entry)
        return entry
      })

    // Slots are named by their number; a name that is not one is no slot.
    const slotNames = {
      first: 0,
      last: config.uidSlots - 1,
      nameOf: String,
      indexOf: (name: string) => /^\d+$/.test(name) ? Number(name) : -1
    }
    return {
      config,
      secrets,
      bin,
      confinement,
      subnet,
      cgroups,
      disk,
      diskStock,
      volumes,
      sandboxesDir,
      helperDir,
      mountPoint: (sandboxId: string) => NodePath.join(mountsDir, sandboxId),
      running,
      withLock,
      owner: (sandboxId: string) => ({ dataDir: config.dataDir, sandboxId }),
      leaseSlot: (sandboxId: string, preferred: number | undefined) =>
        Network.leaseName(config.slotDir, slotNames, { dataDir: config.dataDir, sandboxId }, preferred?.toString())
          .then((name) => name === undefined ? undefined : Number(name)),
      releaseSlot: (sandboxId: string, slot: number | undefined) =>
        slot === undefined
          ? Promise.resolve()
          : Network.release(config.slotDir, String(slot), { dataDir: config.dataDir, sandboxId }),
      templateDir,
      loadRecord,
      lookupRunning
    }
  })
