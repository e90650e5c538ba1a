/**
 * The API's hot path against the machine (issue 17): `wrk -t1 -c32` (a native load generator)
 * against
 *   - a raw node:http server in a process of its own (the baseline),
 *   - the API role alone (`node apps/api/src/main.ts`, its own process): `GET /v1/health` and an
 *     authenticated `GET /v1/auth/me` (a real key, verified through the credential cache),
 *   - `svc dev` (every role in one process, the agent and its warm pool included):
 *     `GET /v1/auth/me`.
 * Also the framework's floors: Effect's HttpRouter, and an HttpApi of one endpoint, with nothing of
 * ours (bench/lib/effect-server.ts), against the same baseline, so that the gap splits into the
 * framework's and ours. Each figure comes with the server's CPU time per request, which the
 * machine's other work barely moves.
 * Baseline and subject alternate run by run; medians of BENCH_RUNS (3) runs of BENCH_DURATION
 * (3s). Target: authenticated GET >= 0.5 of raw.
 * Then the same routes without sockets (bench/lib/api-inprocess.ts, a process of its own): the
 * CPU of the API's JavaScript per request against the HttpApi floor's. Over a socket a slower
 * server also pays more per request in the kernel (bench/README.md), so a change to the routes
 * shows at its own size only here.
 * BENCH_API_ROOT=<checkout>: the API role of another checkout (before/after figures).
 * BENCH_CPU_PROF=<dir>: the API role runs under `node --cpu-prof` and writes its profile there on
 * exit (open it in Chrome's DevTools), to see where a request's time goes.
 *   npm run bench api     (or: node bench/api.ts)
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Duration, Result } from "effect"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { parseDuration } from "../packages/config/src/Env.ts"
import {
  apiInProcess,
  apiMain,
  cliMain,
  mintKey,
  NO_RATE_LIMIT,
  type Role,
  startRole,
  stopRoles
} from "./lib/ApiRole.ts"
import { startEffectServer, startRawServer } from "./lib/Baselines.ts"
import { treeCpuMs } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"
import { wrk, type WrkResult } from "./lib/Wrk.ts"

const run$ = promisify(execFile)
const CONNECTIONS = 32
/** BENCH_DURATION: run length, a duration in the platform's format (`3s`, `500ms`). */
const DURATION_MS = Duration.toMillis(Result.getOrThrow(parseDuration(process.env.BENCH_DURATION ?? "3s")))
const RUNS = Number(process.env.BENCH_RUNS ?? 3)
const [nats, pg] = await Promise.all([startNats(), startPostgres()])
useTestEncryptionKeys()
const children: Array<Role> = []
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-bench-api-"))

const start = async (args: ReadonlyArray<string>, env: Record<string, string>) => {
  const role = await startRole(args, { DATABASE_URL: pg.url, NATS_URL: nats.url, ...env })
  children.push(role)
  return role
}

/** Alternates baseline and subject runs so that drift hits both alike; records the medians. */
interface Server {
  readonly url: string
  readonly pid: number
  readonly headers?: Record<string, string>
}

/** One wrk run, with the server's CPU time per request (a figure the machine's other work barely moves). */
const run = async (server: Server, durationMs: number) => {
  const before = treeCpuMs(server.pid)
  const result = await wrk({
    url: server.url,
    durationMs,
    connections: CONNECTIONS,
    ...(server.headers ? { headers: server.headers } : {})
  })
  return { ...result, cpuUs: ((treeCpuMs(server.pid) - before) * 1000) / Math.max(1, result.requests) }
}

const compare = async (figure: string, raw: Server, subject: Server, target: number | null = 0.5) => {
  const base: Array<WrkResult & { cpuUs: number }> = []
  const subj: Array<WrkResult & { cpuUs: number }> = []
  await run(raw, 1000) // warm-up: JIT, sockets
  await run(subject, 1000)
  for (let i = 0; i < RUNS; i++) {
    base.push(await run(raw, DURATION_MS))
    subj.push(await run(subject, DURATION_MS))
  }
  const failed = subj.reduce((n, r) => n + r.failed, 0)
  if (failed > 0) throw new Error(`${figure}: ${failed} responses were not 2xx`)
  const b = median(base.map((r) => r.rps))
  const s = median(subj.map((r) => r.rps))
  record({
    bench: "api",
    figure,
    value: s,
    unit: "req/s",
    baseline: b,
    baselineName: "raw node:http",
    ratio: s / b,
    ...(target === null ? {} : { target: `ratio >= ${target}`, met: s / b >= target }),
    runs: RUNS
  })
  const cpu = median(subj.map((r) => r.cpuUs))
  const rawCpu = median(base.map((r) => r.cpuUs))
  record({
    bench: "api",
    figure: `${figure}: server CPU per request`,
    value: cpu,
    unit: "µs",
    baseline: rawCpu,
    baselineName: "raw node:http",
    ratio: cpu / rawCpu,
    runs: RUNS
  })
  console.log(
    `    p50 ${median(subj.map((r) => r.p50)).toFixed(2)} ms, p99 ${median(subj.map((r) => r.p99)).toFixed(2)} ms;` +
      ` raw p50 ${median(base.map((r) => r.p50)).toFixed(2)} ms`
  )
}

/**
 * The same routes without sockets (bench/lib/api-inprocess.ts, a process of its own): the CPU of
 * the API's JavaScript per request against the HttpApi floor's, which Node's HTTP and the
 * kernel's writes do not blur.
 */
const inProcess = async () => {
  const script = apiInProcess()
  if (script === undefined) return console.log("  in-process: this checkout has no bench/lib/api-inprocess.ts")
  const { stdout } = await run$(process.execPath, [script], {
    env: { ...process.env, ...NO_RATE_LIMIT, DATABASE_URL: pg.url, NATS_URL: nats.url },
    maxBuffer: 1 << 20
  })
  const [floor, ...routes] = JSON.parse(stdout) as Array<{ name: string; median: number; runs: Array<number> }>
  console.log(`in-process, no sockets (32 in flight, CPU µs per request, median of ${floor!.runs.length}):`)
  for (const route of routes) {
    record({
      bench: "api",
      figure: `in-process: ${route.name}`,
      value: route.median,
      unit: "µs",
      baseline: floor!.median,
      baselineName: "HttpApi of one endpoint",
      ratio: route.median / floor!.median,
      runs: route.runs.length
    })
  }
}

try {
  const raw = await startRawServer("raw")
  const profile = process.env.BENCH_CPU_PROF ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : []
  const api = await start([...profile, apiMain()], {})
  const token = await mintKey(api.url)
  const auth = { authorization: `Bearer ${token}` }
  console.log(`wrk -t1 -c${CONNECTIONS}, ${DURATION_MS} ms per run, each server in its own process`)
  for (const floor of ["router", "api"] as const) {
    const effect = await startEffectServer(floor)
    await compare(
      floor === "router" ? "Effect HttpRouter alone (a floor)" : "Effect HttpApi of one endpoint (a floor)",
      raw,
      effect,
      null
    )
    await effect.stop()
  }
  await compare("API role alone: GET /v1/health", raw, { url: `${api.url}/v1/health`, pid: api.pid })
  await compare("API role alone: authenticated GET /v1/auth/me", raw, {
    url: `${api.url}/v1/auth/me`,
    pid: api.pid,
    headers: auth
  })
  const dev = await start(
    [cliMain(), "dev"],
    { SVC_STATE_DIR: stateDir, SVC_DATA_DIR: path.join(stateDir, "agent") }
  )
  const devKey = await mintKey(dev.url)
  await compare("svc dev: authenticated GET /v1/auth/me", raw, {
    url: `${dev.url}/v1/auth/me`,
    pid: dev.pid,
    headers: { authorization: `Bearer ${devKey}` }
  })
  await raw.stop()
  await inProcess()
} finally {
  await stopRoles(children)
  await Promise.all([nats.stop(), pg.close()])
  fs.rmSync(stateDir, { recursive: true, force: true })
}
