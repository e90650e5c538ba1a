/**
 * cgroup v1 groups of one sandbox: `<root>/<controller>/svc-sandboxes/<hostId>/<sandboxId>`
 * for memory, cpu, cpuacct and pids. A controller that is missing or not writable is skipped
 * and the reason recorded: the sandbox still runs, without that limit.
 */
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import type { LimitStatus } from "../Driver.ts"

export const CONTROLLERS = ["memory", "cpu", "cpuacct", "pids"] as const
export type Controller = (typeof CONTROLLERS)[number]

export interface CgroupSettings {
  readonly root: string
  readonly hostId: string
}

export const groupPath = (settings: CgroupSettings, controller: Controller, sandboxId: string): string =>
  NodePath.join(settings.root, controller, "svc-sandboxes", settings.hostId, sandboxId)

export interface Prepared {
  /** `cgroup.procs` files a starting process writes its pid into. */
  readonly procsFiles: ReadonlyArray<string>
  readonly limits: LimitStatus
}

const write = (file: string, value: string) => Fs.writeFile(file, value)

const reason = (e: unknown): string => (e instanceof Error ? e.message : String(e)).slice(0, 200)

/** Creates the groups and writes the limits. Never fails: what cannot be applied is reported. */
export const prepare = async (
  settings: CgroupSettings,
  sandboxId: string,
  limits: { readonly ramMb: number; readonly cpu: number; readonly pidsMax: number; readonly diskGb: number }
): Promise<Prepared> => {
  const procsFiles: Array<string> = []
  const made = new Map<Controller, string | undefined>()
  for (const controller of CONTROLLERS) {
    const dir = groupPath(settings, controller, sandboxId)
    try {
      await Fs.access(NodePath.join(settings.root, controller, "cgroup.procs"), FsSync.constants.W_OK)
      await Fs.mkdir(dir, { recursive: true })
      made.set(controller, undefined)
      procsFiles.push(NodePath.join(dir, "cgroup.procs"))
    } catch (e) {
      made.set(controller, `unavailable: ${reason(e)}`)
    }
  }
  const apply = async (controller: Controller, step: (dir: string) => Promise<void>): Promise<string> => {
    const missing = made.get(controller)
    if (missing !== undefined) return missing
    try {
      await step(groupPath(settings, controller, sandboxId))
      return "applied"
    } catch (e) {
      return `unavailable: ${reason(e)}`
    }
  }
  const memory = await apply("memory", async (dir) => {
    const bytes = String(limits.ramMb * 1024 * 1024)
    await write(NodePath.join(dir, "memory.limit_in_bytes"), bytes)
    // With swap accounting the limit must cover swap too, or the sandbox swaps past it.
    const memsw = NodePath.join(dir, "memory.memsw.limit_in_bytes")
    if (await Fs.access(memsw).then(() => true, () => false)) await write(memsw, bytes)
  })
  const cpu = await apply("cpu", async (dir) => {
    const period = 100_000
    await write(NodePath.join(dir, "cpu.cfs_period_us"), String(period))
    await write(NodePath.join(dir, "cpu.cfs_quota_us"), String(period * limits.cpu))
  })
  const pids = await apply("pids", (dir) => write(NodePath.join(dir, "pids.max"), String(limits.pidsMax)))
  return {
    procsFiles,
    limits: {
      memory,
      cpu,
      pids,
      disk: `not enforced: the upper layer is a folder on the host file system (diskGb ${limits.diskGb} recorded only)`
    }
  }
}

/** A pids group per exec, so a timeout can end every process the exec started. */
export const makeExecGroup = async (settings: CgroupSettings, sandboxId: string, name: string): Promise<string | undefined> => {
  const dir = NodePath.join(groupPath(settings, "pids", sandboxId), name)
  try {
    await Fs.mkdir(dir)
    return dir
  } catch {
    return undefined
  }
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

/** Removes a group folder once it is empty: a group of exiting processes is busy for a moment. */
export const removeGroup = async (dir: string): Promise<void> => {
  const children = await Fs.readdir(dir, { withFileTypes: true }).catch(() => [])
  for (const child of children) {
    if (child.isDirectory()) await removeGroup(NodePath.join(dir, child.name))
  }
  for (let attempt = 0; attempt < 100; attempt++) {
    killGroupSync(dir)
    try {
      await Fs.rmdir(dir)
      return
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      if (code === "ENOENT") return
      if (code !== "EBUSY") throw e
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
  throw new Error(`cgroup ${dir} stays busy`)
}

/** Removes all groups of the sandbox, killing what still runs in them. */
export const removeAll = async (settings: CgroupSettings, sandboxId: string): Promise<void> => {
  for (const controller of CONTROLLERS) await removeGroup(groupPath(settings, controller, sandboxId))
}

/** Removes the per-exec group if its processes have all ended; keeps it otherwise. */
export const removeIfEmpty = async (dir: string): Promise<void> => {
  await Fs.rmdir(dir).catch(() => undefined)
}

const readNumber = async (file: string): Promise<number | undefined> => {
  try {
    const value = Number((await Fs.readFile(file, "utf8")).trim())
    return Number.isFinite(value) ? value : undefined
  } catch {
    return undefined
  }
}

export const readStats = async (
  settings: CgroupSettings,
  sandboxId: string
): Promise<{ memoryBytes: number | undefined; cpuUsageNs: number | undefined; pids: number | undefined }> => {
  const memoryDir = groupPath(settings, "memory", sandboxId)
  // usage_in_bytes includes page cache; the working set (usage minus inactive file) is what
  // the limit pressures, as docker reports it.
  const usage = await readNumber(NodePath.join(memoryDir, "memory.usage_in_bytes"))
  let memoryBytes = usage
  if (usage !== undefined) {
    const stat = await Fs.readFile(NodePath.join(memoryDir, "memory.stat"), "utf8").catch(() => "")
    const inactive = /^total_inactive_file (\d+)$/m.exec(stat)
    if (inactive) memoryBytes = Math.max(0, usage - Number(inactive[1]))
  }
  return {
    memoryBytes,
    cpuUsageNs: await readNumber(NodePath.join(groupPath(settings, "cpuacct", sandboxId), "cpuacct.usage")),
    pids: await readNumber(NodePath.join(groupPath(settings, "pids", sandboxId), "pids.current"))
  }
}

export const readLimitFile = (settings: CgroupSettings, controller: Controller, sandboxId: string, file: string) =>
  readNumber(NodePath.join(groupPath(settings, controller, sandboxId), file))
