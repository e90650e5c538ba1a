/**
 * A sandbox's control groups: its memory, CPU and pids limits, its usage, the count of its OOM
 * kills, and a group per exec that a timeout kills whole. One interface (`Cgroups`), two
 * implementations, picked by `detect` when the driver starts:
 *
 * - cgroup v1 (`v1`): a hierarchy per controller,
 *   `<root>/<memory|cpu|cpuacct|pids>/svc-sandboxes/<hostId>/<sandboxId>`; limits in
 *   `memory.limit_in_bytes` (+ `memory.memsw.limit_in_bytes` with swap accounting),
 *   `cpu.cfs_quota_us`/`cpu.cfs_period_us`, `pids.max`; OOM kills in `memory.oom_control`.
 * - cgroup v2 (`v2`): one unified hierarchy, `<root>/svc-sandboxes/<hostId>/<sandboxId>`, with
 *   `+memory +cpu +pids` enabled in `cgroup.subtree_control` of the root, `svc-sandboxes` and
 *   `<hostId>` (those hold no processes, as v2 requires); limits in `memory.max`,
 *   `memory.swap.max` (0: a sandbox cannot swap past its memory), `cpu.max`, `pids.max`; OOM
 *   kills in `memory.events`; an exec's group is a child of the sandbox's (the sandbox group's
 *   own `cgroup.subtree_control` stays empty, so it may hold processes beside it) and is ended
 *   through `cgroup.kill`. `memory.oom.group` stays 0: the OOM killer ends one process, not the
 *   whole sandbox.
 *
 * A limit the host cannot apply is skipped and the reason recorded (`unavailable: ...`): the
 * sandbox still runs without it. `probe` says at start which limits hold on this host; the
 * agent refuses to start when one does not, unless its operator allows it.
 *
 * The cgroup file system is the kernel's memory, never a disk: its calls are made synchronously
 * (a few microseconds each), not through libuv's thread pool, whose hop and promise per call
 * cost more CPU than the call itself (about 30 of them per create and adopt).
 */
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"

export type CgroupVersion = "v1" | "v2" | "none"

export interface Limits {
  readonly ramMb: number
  /** Cores: a cap (quota per 100 ms period), not a reservation. */
  readonly cpu: number
  readonly pidsMax: number
  readonly diskGb: number
}

export interface LimitsApplied {
  /** `applied`, or why not (`unavailable: ...`, `not enforced: ...`). */
  readonly memory: string
  readonly cpu: string
  readonly pids: string
  readonly disk: string
}

export interface Prepared {
  /** `cgroup.procs` files a starting process writes its pid into. */
  readonly procsFiles: ReadonlyArray<string>
  readonly limits: LimitsApplied
}

/** What this host enforces: `enforced`, or `unavailable: <why>`. */
export interface Support {
  readonly cgroup: CgroupVersion
  readonly memory: string
  readonly cpu: string
  readonly pids: string
}

/** The group of one exec: every process it starts, so that a timeout can end all of them. */
export interface ExecGroup {
  /** `cgroup.procs` files the exec's first process writes its pid into (its limits and its own group). */
  readonly procsFiles: ReadonlyArray<string>
  /** Kills every process in the exec's group (synchronous: also runs from an interruption). */
  kill(): void
  /** Removes the group if its processes have all ended; keeps it otherwise. */
  remove(): Promise<void>
}

export interface CgroupUsage {
  /** Working set: usage minus inactive file pages (what the limit pressures, as docker reports it). */
  readonly memoryBytes: number | undefined
  readonly cpuUsageNs: number | undefined
  readonly pids: number | undefined
}

export interface Cgroups {
  readonly version: CgroupVersion
  /** Makes a throwaway group and writes each limit into it: what holds on this host. */
  probe(): Promise<Support>
  /** Creates the sandbox's groups and writes its limits. Never fails: what cannot be applied is reported. */
  prepare(sandboxId: string, limits: Limits): Promise<Prepared>
  execGroup(sandboxId: string, name: string): Promise<ExecGroup>
  /** Gives a sandbox's groups (and the processes in them) another sandbox id. */
  rename(fromId: string, toId: string): Promise<void>
  /** Removes all groups of the sandbox, killing what still runs in them. */
  removeAll(sandboxId: string): Promise<void>
  usage(sandboxId: string): Promise<CgroupUsage>
  /** Processes the memory cgroup's OOM killer ended in the sandbox's group since it was made. */
  oomKills(sandboxId: string): Promise<number | undefined>
  /** This host's parent groups, once it has no sandbox left (clean-up of tests and benchmarks). */
  removeHost(): Promise<void>
  /**
   * Caps the processes of all sandboxes of the machine together: `pids.max` of the machine-wide
   * `svc-sandboxes` group (every agent of the machine computes the same figure from the host's
   * limits, `sandboxesPidsCap`). `applied`, or why not.
   */
  limitSandboxes(pidsMax: number): Promise<string>
}

/**
 * The processes all sandboxes of a machine may have together: the host's pid_max (or
 * threads-max, if lower: pids counts threads) less a quarter of it, at least 4096, kept for the
 * host's own processes (agents, API, databases, sshd). 32768 → 24576.
 */
export const sandboxesPidsCap = (pidMax: number, threadsMax: number): number => {
  const ceiling = Math.min(pidMax, threadsMax)
  return Math.max(16, ceiling - Math.max(4096, Math.floor(ceiling / 4)))
}

export interface CgroupSettings {
  readonly root: string
  readonly hostId: string
}

const CPU_PERIOD_US = 100_000
const PARENT = "svc-sandboxes"

/**
 * Which cgroup version `root` holds: `v2` when it is the unified hierarchy itself
 * (`cgroup.controllers` at its top), `v1` when it holds per-controller hierarchies, `none`
 * otherwise. A hybrid host (v1 controllers plus an empty v2 mount at `unified/`) is `v1`.
 */
export const detect = (root: string): CgroupVersion => {
  if (FsSync.existsSync(NodePath.join(root, "cgroup.controllers"))) return "v2"
  if (CONTROLLERS.some((c) => FsSync.existsSync(NodePath.join(root, c, "cgroup.procs")))) return "v1"
  return "none"
}

/** The implementation for the version found under `settings.root` (or the one given). */
export const make = (settings: CgroupSettings, version: CgroupVersion = detect(settings.root)): Cgroups =>
  version === "v2" ? makeV2(settings) : makeV1(settings, version)

// ---------------------------------------------------------------------------------------------
// Shared

const reason = (e: unknown): string => (e instanceof Error ? e.message : String(e)).slice(0, 200)
const unavailable = (e: unknown) => `unavailable: ${reason(e)}`
const exists = (path: string) => FsSync.existsSync(path)
const write = (file: string, value: string) => FsSync.writeFileSync(file, value)

const readNumber = async (file: string): Promise<number | undefined> => {
  try {
    const value = Number((await Fs.readFile(file, "utf8")).trim())
    return Number.isFinite(value) ? value : undefined
  } catch {
    return undefined
  }
}

/** `key N` from a flat-keyed cgroup file (memory.stat, memory.events, cpu.stat, memory.oom_control). */
const readKey = async (file: string, key: string): Promise<number | undefined> => {
  const text = await Fs.readFile(file, "utf8").catch(() => "")
  const match = new RegExp(`^${key} (\\d+)$`, "m").exec(text)
  return match ? Number(match[1]) : undefined
}

const readPids = (dir: string): Array<number> => {
  try {
    return FsSync.readFileSync(NodePath.join(dir, "cgroup.procs"), "utf8")
      .split("\n")
      .filter((line) => line !== "")
      .map(Number)
  } catch {
    return []
  }
}

/** Kills every process in `dir` until none is left (new forks race the first pass). */
export const killGroupSync = (dir: string): void => {
  // v2 (5.14+): one write kills the whole subtree, forks included.
  try {
    FsSync.writeFileSync(NodePath.join(dir, "cgroup.kill"), "1")
  } catch {
    // v1, or an older v2 kernel: signal each process.
  }
  for (let pass = 0; pass < 50; pass++) {
    const pids = readPids(dir)
    if (pids.length === 0) return
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL")
      } catch {
        // Gone already.
      }
    }
  }
}

/** Removes a group folder (children first) once it is empty: a group of exiting processes is busy for a moment. */
export const removeGroup = async (dir: string): Promise<void> => {
  let children: Array<FsSync.Dirent> = []
  try {
    children = FsSync.readdirSync(dir, { withFileTypes: true })
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code
    // No such group (ENOTDIR: a folder above it is not one either): nothing to kill or remove.
    if (code === "ENOENT" || code === "ENOTDIR") return
  }
  for (const child of children) {
    if (child.isDirectory()) await removeGroup(NodePath.join(dir, child.name))
  }
  for (let attempt = 0; attempt < 100; attempt++) {
    killGroupSync(dir)
    try {
      FsSync.rmdirSync(dir)
      return
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      // No such group (ENOTDIR: a folder above it is not one either).
      if (code === "ENOENT" || code === "ENOTDIR") return
      if (code !== "EBUSY") throw e
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
  throw new Error(`cgroup ${dir} stays busy`)
}

const tryMkdir = (dir: string): boolean => {
  try {
    FsSync.mkdirSync(dir)
    return true
  } catch {
    return false
  }
}

const execGroupAt = (dir: string | undefined, limitProcs: ReadonlyArray<string>): ExecGroup => ({
  procsFiles: [...limitProcs, ...(dir !== undefined ? [NodePath.join(dir, "cgroup.procs")] : [])],
  kill: () => {
    if (dir !== undefined) killGroupSync(dir)
  },
  remove: async () => {
    if (dir === undefined) return
    try {
      FsSync.rmdirSync(dir)
    } catch {
      // Still busy, or gone: kept, as the interface says.
    }
  }
})

const probeName = () => `probe-${process.pid}-${Math.random().toString(36).slice(2, 8)}`

const DISK_NOT_ENFORCED = (diskGb: number) =>
  `not enforced: the upper layer is a folder on the host file system (diskGb ${diskGb} recorded only)`

// ---------------------------------------------------------------------------------------------
// cgroup v1

export const CONTROLLERS = ["memory", "cpu", "cpuacct", "pids"] as const
export type Controller = (typeof CONTROLLERS)[number]

/** A sandbox's group of one v1 controller. */
export const groupPath = (settings: CgroupSettings, controller: Controller, sandboxId: string): string =>
  NodePath.join(settings.root, controller, PARENT, settings.hostId, sandboxId)

const makeV1 = (settings: CgroupSettings, version: CgroupVersion): Cgroups => {
  const group = (controller: Controller, sandboxId: string) => groupPath(settings, controller, sandboxId)

  /** Writes the memory limit; memsw (swap accounting) must stay >= the limit, so the order depends on the direction. */
  const writeMemory = async (dir: string, ramMb: number) => {
    const bytes = String(ramMb * 1024 * 1024)
    const memsw = NodePath.join(dir, "memory.memsw.limit_in_bytes")
    const swapAccounted = exists(memsw)
    // Raising: memsw first. Lowering: the limit first. Writing memsw around the limit covers both.
    if (swapAccounted) {
      try {
        write(memsw, bytes)
      } catch {
        // Lowering: below the current limit it is refused until the limit is written.
      }
    }
    write(NodePath.join(dir, "memory.limit_in_bytes"), bytes)
    // With swap accounting the limit must cover swap too, or the sandbox swaps past it.
    if (swapAccounted) write(memsw, bytes)
  }
  const writeCpu = async (dir: string, cpu: number) => {
    write(NodePath.join(dir, "cpu.cfs_period_us"), String(CPU_PERIOD_US))
    write(NodePath.join(dir, "cpu.cfs_quota_us"), String(Math.round(CPU_PERIOD_US * cpu)))
  }
  const writePids = async (dir: string, pidsMax: number) => write(NodePath.join(dir, "pids.max"), String(pidsMax))

  const makeGroup = async (controller: Controller, name: string) => {
    FsSync.accessSync(NodePath.join(settings.root, controller, "cgroup.procs"), FsSync.constants.W_OK)
    const dir = group(controller, name)
    FsSync.mkdirSync(dir, { recursive: true })
    return dir
  }

  const probe = async (): Promise<Support> => {
    const name = probeName()
    const check = async (controller: Controller, step: (dir: string) => Promise<void>) => {
      let dir: string | undefined
      try {
        dir = await makeGroup(controller, name)
        await step(dir)
        return "enforced"
      } catch (e) {
        return unavailable(e)
      } finally {
        if (dir !== undefined) await Fs.rmdir(dir).catch(() => undefined)
      }
    }
    return {
      cgroup: version,
      memory: await check("memory", (dir) => writeMemory(dir, 64)),
      cpu: await check("cpu", (dir) => writeCpu(dir, 1)),
      pids: await check("pids", (dir) => writePids(dir, 64))
    }
  }

  const prepare = async (sandboxId: string, limits: Limits): Promise<Prepared> => {
    const procsFiles: Array<string> = []
    const made = new Map<Controller, string | undefined>()
    for (const controller of CONTROLLERS) {
      try {
        const dir = await makeGroup(controller, sandboxId)
        made.set(controller, undefined)
        procsFiles.push(NodePath.join(dir, "cgroup.procs"))
      } catch (e) {
        made.set(controller, unavailable(e))
      }
    }
    const apply = async (controller: Controller, step: (dir: string) => Promise<void>): Promise<string> => {
      const missing = made.get(controller)
      if (missing !== undefined) return missing
      try {
        await step(group(controller, sandboxId))
        return "applied"
      } catch (e) {
        return unavailable(e)
      }
    }
    return {
      procsFiles,
      limits: {
        memory: await apply("memory", (dir) => writeMemory(dir, limits.ramMb)),
        cpu: await apply("cpu", (dir) => writeCpu(dir, limits.cpu)),
        pids: await apply("pids", (dir) => writePids(dir, limits.pidsMax)),
        disk: DISK_NOT_ENFORCED(limits.diskGb)
      }
    }
  }

  /** The sandbox's memory, cpu and cpuacct groups, plus a pids group of the exec's own under the sandbox's. */
  const execGroup = async (sandboxId: string, name: string): Promise<ExecGroup> => {
    const limitProcs = (["memory", "cpu", "cpuacct"] as const)
      .map((c) => NodePath.join(group(c, sandboxId), "cgroup.procs"))
      .filter((file) => FsSync.existsSync(file))
    const dir = NodePath.join(group("pids", sandboxId), name)
    const made = tryMkdir(dir)
    return execGroupAt(made ? dir : undefined, limitProcs)
  }

  // v1 renames a group within its parent, processes and all.
  const rename = async (fromId: string, toId: string) => {
    for (const controller of CONTROLLERS) {
      const dir = group(controller, fromId)
      if (exists(dir)) FsSync.renameSync(dir, group(controller, toId))
    }
  }

  const removeAll = async (sandboxId: string) => {
    for (const controller of CONTROLLERS) await removeGroup(group(controller, sandboxId))
  }

  const usage = async (sandboxId: string): Promise<CgroupUsage> => {
    const memoryDir = group("memory", sandboxId)
    const used = await readNumber(NodePath.join(memoryDir, "memory.usage_in_bytes"))
    const inactive = used === undefined
      ? undefined
      : await readKey(NodePath.join(memoryDir, "memory.stat"), "total_inactive_file")
    return {
      memoryBytes: used === undefined ? undefined : Math.max(0, used - (inactive ?? 0)),
      cpuUsageNs: await readNumber(NodePath.join(group("cpuacct", sandboxId), "cpuacct.usage")),
      pids: await readNumber(NodePath.join(group("pids", sandboxId), "pids.current"))
    }
  }

  const oomKills = (sandboxId: string) =>
    readKey(NodePath.join(group("memory", sandboxId), "memory.oom_control"), "oom_kill")

  const removeHost = async () => {
    for (const controller of CONTROLLERS) {
      await Fs.rmdir(NodePath.join(settings.root, controller, PARENT, settings.hostId)).catch(() => undefined)
    }
  }

  const limitSandboxes = async (pidsMax: number) => {
    try {
      const dir = NodePath.join(settings.root, "pids", PARENT)
      FsSync.mkdirSync(dir, { recursive: true })
      await writePids(dir, pidsMax)
      return "applied"
    } catch (e) {
      return unavailable(e)
    }
  }

  return { version, probe, prepare, execGroup, rename, removeAll, usage, oomKills, removeHost, limitSandboxes }
}

// ---------------------------------------------------------------------------------------------
// cgroup v2

const V2_CONTROLLERS = ["memory", "cpu", "pids"] as const
type V2Controller = (typeof V2_CONTROLLERS)[number]

const makeV2 = (settings: CgroupSettings): Cgroups => {
  const parent = NodePath.join(settings.root, PARENT)
  const hostDir = NodePath.join(parent, settings.hostId)
  const group = (sandboxId: string) => NodePath.join(hostDir, sandboxId)

  /**
   * Enables each controller for the host's groups: in `cgroup.subtree_control` of the root,
   * `svc-sandboxes` and `<hostId>` (one write per controller, so that one the kernel lacks does
   * not block the others). Returns why a controller is unavailable, or nothing for one enabled.
   */
  const enable = async (): Promise<Map<V2Controller, string | undefined>> => {
    const result = new Map<V2Controller, string | undefined>()
    let offered: ReadonlyArray<string> = []
    try {
      offered = FsSync.readFileSync(NodePath.join(settings.root, "cgroup.controllers"), "utf8").trim().split(/\s+/)
      FsSync.mkdirSync(hostDir, { recursive: true })
    } catch (e) {
      for (const c of V2_CONTROLLERS) result.set(c, unavailable(e))
      return result
    }
    for (const controller of V2_CONTROLLERS) {
      if (!offered.includes(controller)) {
        result.set(
          controller,
          `unavailable: the ${controller} controller is not in ${settings.root}/cgroup.controllers`
        )
        continue
      }
      try {
        for (const dir of [settings.root, parent, hostDir]) {
          write(NodePath.join(dir, "cgroup.subtree_control"), `+${controller}`)
        }
        result.set(controller, undefined)
      } catch (e) {
        result.set(controller, unavailable(e))
      }
    }
    return result
  }

  const writeMemory = async (dir: string, ramMb: number) => {
    write(NodePath.join(dir, "memory.max"), String(ramMb * 1024 * 1024))
    // Without swap accounting there is no such file and nothing to swap past the limit with.
    try {
      write(NodePath.join(dir, "memory.swap.max"), "0")
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      if (code !== "ENOENT" && code !== "EACCES" && code !== "EPERM") throw e
    }
  }
  const writeCpu = async (dir: string, cpu: number) =>
    write(NodePath.join(dir, "cpu.max"), `${Math.round(CPU_PERIOD_US * cpu)} ${CPU_PERIOD_US}`)
  const writePids = async (dir: string, pidsMax: number) => write(NodePath.join(dir, "pids.max"), String(pidsMax))

  const writeAll = async (
    dir: string,
    enabled: Map<V2Controller, string | undefined>,
    limits: Omit<Limits, "diskGb">
  ) => {
    const apply = async (controller: V2Controller, step: () => Promise<void>) => {
      const missing = enabled.get(controller)
      if (missing !== undefined) return missing
      try {
        await step()
        return "applied"
      } catch (e) {
        return unavailable(e)
      }
    }
    return {
      memory: await apply("memory", () => writeMemory(dir, limits.ramMb)),
      cpu: await apply("cpu", () => writeCpu(dir, limits.cpu)),
      pids: await apply("pids", () => writePids(dir, limits.pidsMax))
    }
  }

  const probe = async (): Promise<Support> => {
    const enabled = await enable()
    const dir = group(probeName())
    try {
      await Fs.mkdir(dir)
    } catch (e) {
      return { cgroup: "v2", memory: unavailable(e), cpu: unavailable(e), pids: unavailable(e) }
    }
    try {
      const applied = await writeAll(dir, enabled, { ramMb: 64, cpu: 1, pidsMax: 64 })
      const held = (status: string) => (status === "applied" ? "enforced" : status)
      return { cgroup: "v2", memory: held(applied.memory), cpu: held(applied.cpu), pids: held(applied.pids) }
    } finally {
      // A real group goes with rmdir (its files are the kernel's); anything else with its files.
      await Fs.rmdir(dir).catch(() => Fs.rm(dir, { recursive: true, force: true })).catch(() => undefined)
    }
  }

  const prepare = async (sandboxId: string, limits: Limits): Promise<Prepared> => {
    const enabled = await enable()
    const dir = group(sandboxId)
    try {
      FsSync.mkdirSync(dir, { recursive: true })
    } catch (e) {
      const why = unavailable(e)
      return { procsFiles: [], limits: { memory: why, cpu: why, pids: why, disk: DISK_NOT_ENFORCED(limits.diskGb) } }
    }
    return {
      procsFiles: [NodePath.join(dir, "cgroup.procs")],
      limits: { ...(await writeAll(dir, enabled, limits)), disk: DISK_NOT_ENFORCED(limits.diskGb) }
    }
  }

  // A child of the sandbox's group: its limits cover the exec; the child alone is killed.
  const execGroup = async (sandboxId: string, name: string): Promise<ExecGroup> => {
    const dir = NodePath.join(group(sandboxId), name)
    const made = tryMkdir(dir)
    return execGroupAt(made ? dir : undefined, [])
  }

  /**
   * v2 cannot rename a group: a new one is made and every process moved into it (a pool entry
   * being adopted is idle; a fork racing the move is caught by the next pass). Memory already
   * charged stays with the old group until freed.
   */
  const rename = async (fromId: string, toId: string) => {
    const from = group(fromId)
    if (!exists(from)) return
    const to = group(toId)
    FsSync.mkdirSync(to, { recursive: true })
    const dirs = (dir: string): Array<string> => {
      let children: Array<FsSync.Dirent> = []
      try {
        children = FsSync.readdirSync(dir, { withFileTypes: true })
      } catch {
        // Gone meanwhile.
      }
      return [dir, ...children.filter((c) => c.isDirectory()).flatMap((c) => dirs(NodePath.join(dir, c.name)))]
    }
    for (let pass = 0; pass < 20; pass++) {
      const pids = dirs(from).flatMap(readPids)
      if (pids.length === 0) break
      for (const pid of pids) {
        try {
          write(NodePath.join(to, "cgroup.procs"), String(pid))
        } catch (e) {
          // A process that exited meanwhile.
          if ((e as NodeJS.ErrnoException).code !== "ESRCH") throw e
        }
      }
    }
    await removeGroup(from)
  }

  const removeAll = (sandboxId: string) => removeGroup(group(sandboxId))

  const usage = async (sandboxId: string): Promise<CgroupUsage> => {
    const dir = group(sandboxId)
    const used = await readNumber(NodePath.join(dir, "memory.current"))
    const inactive = used === undefined ? undefined : await readKey(NodePath.join(dir, "memory.stat"), "inactive_file")
    const cpuUs = await readKey(NodePath.join(dir, "cpu.stat"), "usage_usec")
    return {
      memoryBytes: used === undefined ? undefined : Math.max(0, used - (inactive ?? 0)),
      cpuUsageNs: cpuUs === undefined ? undefined : cpuUs * 1000,
      pids: await readNumber(NodePath.join(dir, "pids.current"))
    }
  }

  const oomKills = (sandboxId: string) => readKey(NodePath.join(group(sandboxId), "memory.events"), "oom_kill")

  const removeHost = async () => {
    await Fs.rmdir(hostDir).catch(() => undefined)
  }

  const limitSandboxes = async (pidsMax: number) => {
    const missing = (await enable()).get("pids")
    if (missing !== undefined) return missing
    try {
      await writePids(parent, pidsMax)
      return "applied"
    } catch (e) {
      return unavailable(e)
    }
  }

  return {
    version: "v2",
    probe,
    prepare,
    execGroup,
    rename,
    removeAll,
    usage,
    oomKills,
    removeHost,
    limitSandboxes
  }
}
