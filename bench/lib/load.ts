/** Helpers shared by the benchmarks: a load run in a second process, medians, a raw baseline. */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"

export interface LoadResult {
  readonly ok: number
  readonly failed: number
  readonly rps: number
  readonly p50: number
  readonly p99: number
}

export const load = (options: {
  readonly url: string
  readonly connections: number
  readonly durationMs: number
  readonly headers?: Record<string, string>
  readonly method?: string
  readonly body?: string
}): Promise<LoadResult> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [
      new URL("./load-worker.ts", import.meta.url).pathname,
      JSON.stringify(options)
    ], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    let out = ""
    child.stdout.on("data", (d) => (out += d))
    child.once(
      "exit",
      (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`load worker exited ${code}`)))
    )
  })

export const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** The baseline: a raw node:http hello-world answering JSON, in this process like the server under test. */
export const rawServer = async (): Promise<{ url: string; close: () => Promise<void> }> => {
  const body = JSON.stringify({ status: "ok" })
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
    res.end(body)
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections()
        server.close(() => r())
      })
  }
}

export const fmt = (n: number, digits = 0) =>
  n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })

/**
 * Alternates baseline and subject runs (so drift hits both alike) and prints medians and the ratio.
 */
export const compare = async (options: {
  readonly title: string
  readonly runs: number
  readonly baseline: () => Promise<LoadResult>
  readonly subject: () => Promise<LoadResult>
  readonly target?: number
}) => {
  const base: Array<LoadResult> = []
  const subj: Array<LoadResult> = []
  for (let i = 0; i < options.runs; i++) {
    base.push(await options.baseline())
    subj.push(await options.subject())
  }
  const b = median(base.map((r) => r.rps))
  const s = median(subj.map((r) => r.rps))
  const failures = subj.reduce((n, r) => n + r.failed, 0)
  console.log(options.title)
  console.log(`  baseline (raw node:http) ${fmt(b)} req/s  p99 ${fmt(median(base.map((r) => r.p99)), 2)} ms`)
  console.log(
    `  platform                 ${fmt(s)} req/s  p99 ${
      fmt(median(subj.map((r) => r.p99)), 2)
    } ms  (non-2xx: ${failures})`
  )
  console.log(
    `  ratio ${fmt(s / b, 2)}${
      options.target !== undefined ? `  (target >= ${options.target})` : ""
    }  median of ${options.runs} runs`
  )
  return { baseline: b, subject: s, ratio: s / b }
}

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
