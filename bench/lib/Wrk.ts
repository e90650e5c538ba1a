/**
 * The HTTP load generator of the benchmarks: `wrk` (Debian's package, installed by the set-up),
 * a native process that outruns any server here, so a figure measures the server and not the
 * generator (Node's own clients saturate at 10–15k requests/s on 2 cores). Headers and bodies go
 * through a Lua script in a private directory: a benchmark's token never reaches a process list.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

export interface WrkResult {
  readonly rps: number
  readonly requests: number
  /** Responses that were not 2xx or 3xx, and socket errors. */
  readonly failed: number
  readonly p50: number
  readonly p99: number
}

export interface WrkOptions {
  readonly url: string
  readonly connections?: number
  readonly durationMs: number
  readonly headers?: Record<string, string>
  readonly method?: string
  readonly body?: string
}

const luaString = (s: string) => JSON.stringify(s) // a JSON string is a valid Lua string literal for ASCII

const millis = (value: string, unit: string) =>
  Number(value) * (unit === "us" ? 0.001 : unit === "ms" ? 1 : unit === "s" ? 1000 : unit === "m" ? 60_000 : NaN)

/** Parses wrk's report (`--latency`). Exported for the benchmark library's own check. */
export const parseWrk = (out: string): WrkResult => {
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1])
  const requests = Number(/(\d+) requests in/.exec(out)?.[1])
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0)
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out)
  const socketErrors = errors ? errors.slice(1).reduce((a, b) => a + Number(b), 0) : 0
  const pct = (p: string) => {
    const m = new RegExp(`\\s${p}%\\s+([\\d.]+)(us|ms|s|m)`).exec(out)
    return m ? millis(m[1]!, m[2]!) : NaN
  }
  if (!Number.isFinite(rps) || !Number.isFinite(requests)) throw new Error(`unreadable wrk report:\n${out}`)
  return { rps, requests, failed: non2xx + socketErrors, p50: pct("50"), p99: pct("99") }
}

export const wrk = (options: WrkOptions): Promise<WrkResult> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-wrk-"))
  const script = path.join(dir, "request.lua")
  const lines = [
    `wrk.method = ${luaString(options.method ?? "GET")}`,
    ...Object.entries(options.headers ?? {}).map(([k, v]) => `wrk.headers[${luaString(k)}] = ${luaString(v)}`),
    ...(options.body === undefined ? [] : [`wrk.body = ${luaString(options.body)}`])
  ]
  fs.writeFileSync(script, lines.join("\n") + "\n", { mode: 0o600 })
  const seconds = Math.max(1, Math.round(options.durationMs / 1000))
  const args = ["-t1", `-c${options.connections ?? 32}`, `-d${seconds}s`, "--latency", "-s", script, options.url]
  return new Promise<WrkResult>((resolve, reject) =>
    execFile("wrk", args, { maxBuffer: 1 << 20 }, (error, stdout, stderr) => {
      fs.rmSync(dir, { recursive: true, force: true })
      if (error) return reject(new Error(`wrk failed: ${error.message} ${stderr}`))
      try {
        resolve(parseWrk(stdout))
      } catch (e) {
        reject(e)
      }
    })
  )
}
