/** Helpers shared by the benchmarks: number formatting, CPU time of a process tree. */
import * as fs from "node:fs"

export const fmt = (n: number, digits = 0) =>
  n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })

/**
 * CPU time (user + system, ms) used so far by a process and all its descendants, from /proc:
 * a figure that other work on the machine barely moves, unlike latency. Linux only; clock ticks
 * (10 ms), so compare over runs of seconds.
 */
export const treeCpuMs = (rootPid: number = process.pid): number =>
  Object.values(treeCpuByName(rootPid)).reduce((a, b) => a + b, 0)

/** `treeCpuMs` by process: the command name, with the node scripts' first argument. */
export const treeCpuByName = (rootPid: number = process.pid): Record<string, number> => {
  const ticks = 100
  const children = new Map<number, Array<number>>()
  const cpu = new Map<number, number>()
  const names = new Map<number, string>()
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    let stat: string
    try {
      stat = fs.readFileSync(`/proc/${entry}/stat`, "utf8")
    } catch {
      continue
    }
    // Fields after the command name (which may hold spaces): state is field 3.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    const pid = Number(entry)
    const ppid = Number(fields[1])
    cpu.set(pid, ((Number(fields[11]) + Number(fields[12])) * 1000) / ticks)
    names.set(pid, nameOf(pid, stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"))))
    children.set(ppid, [...(children.get(ppid) ?? []), pid])
  }
  const byName: Record<string, number> = {}
  const walk = (pid: number) => {
    const name = names.get(pid) ?? "?"
    byName[name] = (byName[name] ?? 0) + (cpu.get(pid) ?? 0)
    for (const child of children.get(pid) ?? []) walk(child)
  }
  walk(rootPid)
  return byName
}

const nameOf = (pid: number, comm: string) => {
  if (comm !== "MainThread" && !comm.startsWith("node")) return comm
  try {
    const args = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")
    return `node ${
      args.slice(1).find((a) => a.startsWith("--") && !a.startsWith("--cpu")) ??
        args.slice(1, 2).join(" ").split("/").at(-1)
    }`
  } catch {
    return comm
  }
}

/**
 * CPU time (ms) of one process so far: its own (user + system), and that of the children it has
 * waited for (what short-lived helpers it started cost, once they ended). Zero once it is gone.
 */
export const processCpuMs = (pid: number): { readonly own: number; readonly reaped: number } => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    // Fields after the command name (which may hold spaces): utime, stime, cutime, cstime are 14-17.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number)
    return { own: (fields[11]! + fields[12]!) * 10, reaped: (fields[13]! + fields[14]!) * 10 }
  } catch {
    return { own: 0, reaped: 0 }
  }
}

/** The first process whose command line (arguments joined by spaces) `matches`. */
export const findProcess = (matches: (cmdline: string) => boolean): number | undefined => {
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (matches(fs.readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").join(" "))) return Number(entry)
    } catch {
      // gone
    }
  }
  return undefined
}

/**
 * CPU time (ms) the whole machine has spent busy, all cores: user, nice, system, irq and softirq
 * (not idle, iowait, nor steal: time the hypervisor gave to someone else is not ours).
 */
export const machineBusyMs = (): number => {
  const cpu = fs.readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number)
  // user nice system idle iowait irq softirq steal (guest time is already in user)
  const busy = cpu[0]! + cpu[1]! + cpu[2]! + cpu[5]! + cpu[6]!
  return (busy * 1000) / 100
}
