/**
 * CPU accounting of a benchmark's stack, per process and by cgroup (bench/tti.ts): what each role
 * (API, runtime, agent and its children, Postgres, NATS, the bench's own SDK clients) and the
 * machine spent, read before and after a measured mode. Linux only.
 *
 * - By process: `/proc/<pid>/stat` of each role (10 ms ticks), the agent's descendants with what
 *   each reaped.
 * - By cgroup: the run's own cpuacct group (cgroup v1; `cpu.stat` on v2), which the bench joins
 *   before it starts anything, so that every process of the stack (the roles, NATS, Postgres, the
 *   spawner, mkfs, svc-enter, the commands they ran, short-lived or not, reaped by whoever) is
 *   counted, and nothing of another tenant's. The sandboxes move themselves into their own groups
 *   (`svc-sandboxes/<hostId>/<sandbox>`), counted apart: their parent's usage keeps that of the
 *   groups already removed (cpuacct charges up the hierarchy as the time is used).
 * - The machine: its busy time by kind (`/proc/stat`), every tenant's.
 * - `perfRecord`: `perf record` of the whole machine during a mode, and its summary.
 */
import { execFileSync, spawn } from "node:child_process"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import { machineBusyMs, processCpuMs, treeCpuMs } from "./Measure.ts"

export interface Pids {
  readonly api: number
  readonly runtime: number
  readonly agent: number
  readonly postgres: number | undefined
  readonly nats: number | undefined
}

/** The pids below `pid` (children, theirs, ...), from /proc/<pid>/task/<tid>/children. */
const descendants = (pid: number): Array<number> => {
  let tasks: Array<string>
  try {
    tasks = FsSync.readdirSync(`/proc/${pid}/task`)
  } catch {
    return []
  }
  const children = tasks.flatMap((tid) => {
    try {
      return FsSync.readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim().split(" ").filter(Boolean)
        .map(Number)
    } catch {
      return []
    }
  })
  return children.flatMap((child) => [child, ...descendants(child)])
}

/** CPU ms of every process below `pid`, each with what it reaped (the commands that ended there). */
const belowCpuMs = (pid: number) =>
  descendants(pid).reduce((sum, child) => {
    const cpu = processCpuMs(child)
    return sum + cpu.own + cpu.reaped
  }, 0)

const CGROUP_ROOT = "/sys/fs/cgroup"
const cgroupV2 = FsSync.existsSync(NodePath.join(CGROUP_ROOT, "cgroup.controllers"))

/** {user, system} ms of a cgroup, hierarchically (cpuacct.usage_user/_sys on v1, cpu.stat on v2). */
const groupCpuMs = (dir: string): { readonly user: number; readonly system: number } => {
  try {
    if (cgroupV2) {
      const stat = FsSync.readFileSync(NodePath.join(dir, "cpu.stat"), "utf8")
      const key = (k: string) => Number(new RegExp(`^${k} (\\d+)$`, "m").exec(stat)?.[1] ?? 0)
      return { user: key("user_usec") / 1000, system: key("system_usec") / 1000 }
    }
    const read = (f: string) => Number(FsSync.readFileSync(NodePath.join(dir, f), "utf8")) / 1e6
    return { user: read("cpuacct.usage_user"), system: read("cpuacct.usage_sys") }
  } catch {
    return { user: 0, system: 0 }
  }
}

const sandboxesGroup = (hostId: string) =>
  cgroupV2
    ? NodePath.join(CGROUP_ROOT, "svc-sandboxes", hostId)
    : NodePath.join(CGROUP_ROOT, "cpuacct", "svc-sandboxes", hostId)

/** The machine's busy time by kind (ms, all cores, /proc/stat): user (with nice), system, irq + softirq. */
const machineKinds = () => {
  const cpu = FsSync.readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number)
  return { user: (cpu[0]! + cpu[1]!) * 10, system: cpu[2]! * 10, irq: (cpu[5]! + cpu[6]!) * 10 }
}

/** The rows' names that are a second view by cgroup and kind (not a share of the per-process rows). */
export const BY_GROUP = {
  runUser: "= the run's cgroup, user (every process but the sandboxes)",
  runSystem: "= the run's cgroup, system",
  sandboxesUser: "= the sandboxes' cgroups, user",
  sandboxesSystem: "= the sandboxes' cgroups, system",
  irq: "= machine: irq and softirq (loopback TCP's receive side among them)"
} as const

/**
 * The run's accounting: `join` moves this process into a group of its own (named after `name` and
 * the pid; call it before anything is started), `read` takes every row's cumulative ms, `perRun`
 * the difference of two readings divided by the iterations, `leave` removes the group.
 */
export const makeCpuAccounting = (options: {
  readonly name: string
  readonly log: (line: string) => void
}) => {
  const group = cgroupV2
    ? NodePath.join(CGROUP_ROOT, `${options.name}-${process.pid}`)
    : NodePath.join(CGROUP_ROOT, "cpuacct", `${options.name}-${process.pid}`)

  const join = () => {
    try {
      FsSync.mkdirSync(group)
      FsSync.writeFileSync(NodePath.join(group, "cgroup.procs"), String(process.pid))
      return true
    } catch (e) {
      options.log(`no cgroup of the run's own (${e instanceof Error ? e.message : e}): its CPU rows read 0`)
      return false
    }
  }

  const leave = () => {
    try {
      FsSync.writeFileSync(NodePath.join(NodePath.dirname(group), "cgroup.procs"), String(process.pid))
      FsSync.rmdirSync(group)
    } catch {
      // Still holding a process (a sandbox's monitor left behind): the group stays, harmless.
    }
  }

  /** Every row's cumulative CPU ms now. `hostId`: the agent's, whose sandboxes' groups are read. */
  const read = (pids: Pids, hostId: string) => {
    const agentOwn = processCpuMs(pids.agent).own
    const run = groupCpuMs(group)
    const sandboxes = groupCpuMs(sandboxesGroup(hostId))
    const kinds = machineKinds()
    return {
      "machine (all cores, every process)": machineBusyMs(),
      "API": processCpuMs(pids.api).own,
      "runtime": processCpuMs(pids.runtime).own,
      "agent (its own process)": agentOwn,
      // Its spawner, the commands it ran and reaped (mkfs, mounts, svc-enter), the sandboxes'
      // processes: the monitors still there and what they reaped; an ended sandbox's whole tree
      // once its parent reaped it.
      "agent's children and sandboxes": belowCpuMs(pids.agent) + processCpuMs(pids.agent).reaped,
      "Postgres (every backend)": pids.postgres !== undefined
        ? treeCpuMs(pids.postgres) + processCpuMs(pids.postgres).reaped
        : 0,
      "NATS": pids.nats !== undefined ? processCpuMs(pids.nats).own : 0,
      "bench (SDK clients)": (process.cpuUsage().user + process.cpuUsage().system) / 1000,
      // The kernel's own threads (kthreadd's children: loop devices, ext4's journal, the network
      // namespaces' and cgroups' teardown, RCU), every one of them, ours or not.
      "kernel threads (all)": treeCpuMs(2),
      // A second view of the same time: the run's processes by cgroup, whoever reaped them, and
      // the machine's kernel time by kind.
      [BY_GROUP.runUser]: run.user,
      [BY_GROUP.runSystem]: run.system,
      [BY_GROUP.sandboxesUser]: sandboxes.user,
      [BY_GROUP.sandboxesSystem]: sandboxes.system,
      "= machine: user": kinds.user,
      "= machine: system": kinds.system,
      [BY_GROUP.irq]: kinds.irq
    } as Record<string, number>
  }

  /** ms per iteration of each row between two readings. */
  const perRun = (before: Record<string, number>, after: Record<string, number>, iterations: number) =>
    Object.fromEntries(Object.entries(after).map(([k, v]) => [k, (v - (before[k] ?? 0)) / iterations]))

  /**
   * `perf record` of the whole machine (software clock, 499 Hz, call graphs) into `<dir>/<mode>.data`
   * until the returned function is called, which prints the samples by command and the kernel's top
   * functions. The machine's other tenants are in it too (by command name they mostly stand apart).
   * Needs `perf` (Debian's linux-perf) and root. `dir` undefined: nothing.
   */
  const perfRecord = async (dir: string | undefined, mode: string) => {
    if (dir === undefined) return async () => undefined
    FsSync.mkdirSync(dir, { recursive: true })
    const file = NodePath.join(dir, `${mode.replace(/ /g, "-")}.data`)
    const child = spawn("perf", ["record", "-q", "-a", "-g", "-e", "cpu-clock", "-F", "499", "-o", file], {
      stdio: ["ignore", "ignore", "inherit"]
    })
    // Not the run's: its own CPU (the samples' writing) stays out of the run's cgroup.
    try {
      FsSync.writeFileSync(NodePath.join(NodePath.dirname(group), "cgroup.procs"), String(child.pid))
    } catch {
      // No group of the run's own.
    }
    await new Promise((resolve) => setTimeout(resolve, 500))
    return async () => {
      const ended = new Promise((resolve) => child.once("exit", resolve))
      child.kill("SIGINT")
      await ended
      const report = (sort: string, extra: ReadonlyArray<string> = []) =>
        execFileSync(
          "perf",
          ["report", "-i", file, "--stdio", "--no-children", "-g", "none", "--sort", sort, ...extra],
          { encoding: "utf8", maxBuffer: 64 * 1024 * 1024, stdio: ["ignore", "pipe", "ignore"] }
        ).split("\n").filter((l) => /^\s+\d/.test(l))
      options.log(`perf ${mode}: by command\n${report("comm").slice(0, 25).join("\n")}`)
      options.log(
        `perf ${mode}: kernel functions\n${report("sym", ["--dsos", "[kernel.kallsyms]"]).slice(0, 40).join("\n")}`
      )
      return file
    }
  }

  return { join, leave, read, perRun, perfRecord }
}

/** Prints a mode's rows (ms per iteration): per process, then by cgroup and kind, and what is left. */
export const printCpu = (title: string, cpu: Record<string, number>, fmt: (n: number, digits?: number) => string) => {
  console.log(`\nCPU per create, ${title} (ms)`)
  const rows = Object.entries(cpu)
  for (const [name, v] of rows) {
    if (!name.startsWith("=")) console.log(`  ${name.padEnd(50)}${fmt(v, 1).padStart(8)}`)
  }
  const [machine, ...named] = rows.filter(([name]) => !name.startsWith("=")).map(([, v]) => v)
  const rest = machine! - named.reduce((a, b) => a + b, 0)
  console.log(`  ${"the rest (other tenants, interrupts)".padEnd(50)}${fmt(rest, 1).padStart(8)}`)
  // By cgroup: every process of the run whoever reaped it, the sandboxes apart, and the machine's
  // kernel time by kind; what none of those holds is other tenants' work (or kernel threads).
  console.log(`  by cgroup and kind:`)
  for (const [name, v] of rows) {
    if (name.startsWith("=")) console.log(`  ${name.slice(2).padEnd(68)}${fmt(v, 1).padStart(8)}`)
  }
  const ours = oursByGroup(cpu)
  console.log(`  ${"ours by cgroup, all (run + sandboxes)".padEnd(68)}${fmt(ours, 1).padStart(8)}`)
  console.log(
    `  ${"machine − ours − irq/softirq − kernel threads (other tenants)".padEnd(68)}${
      fmt(machine! - ours - cpu[BY_GROUP.irq]! - cpu["kernel threads (all)"]!, 1).padStart(8)
    }`
  )
}

/** Ours by cgroup: the run's group and the sandboxes' groups, user and system. */
export const oursByGroup = (cpu: Record<string, number>) =>
  cpu[BY_GROUP.runUser]! + cpu[BY_GROUP.runSystem]! + cpu[BY_GROUP.sandboxesUser]! + cpu[BY_GROUP.sandboxesSystem]!
