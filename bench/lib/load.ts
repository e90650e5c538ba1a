/** Helpers shared by the benchmarks: a load run in a second process, medians, a raw baseline. */
import { spawn } from "node:child_process"
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
    const child = spawn(process.execPath, [new URL("./load-worker.ts", import.meta.url).pathname, JSON.stringify(options)], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    let out = ""
    child.stdout.on("data", (d) => (out += d))
    child.once("exit", (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`load worker exited ${code}`))))
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
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()) })
  }
}

export const fmt = (n: number, digits = 0) => n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })

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
  console.log(`  platform                 ${fmt(s)} req/s  p99 ${fmt(median(subj.map((r) => r.p99)), 2)} ms  (non-2xx: ${failures})`)
  console.log(`  ratio ${fmt(s / b, 2)}${options.target !== undefined ? `  (target >= ${options.target})` : ""}  median of ${options.runs} runs`)
  return { baseline: b, subject: s, ratio: s / b }
}
