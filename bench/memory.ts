/**
 * The API's resident memory under a sustained load (issue 17: it must stay flat): the API role
 * alone (`node apps/api/src/main.ts`) under `wrk -t1 -c32` for BENCH_WINDOWS (6) windows of
 * BENCH_WINDOW (10s) each, half authenticated `GET /v1/auth/me`, half `GET /v1/sandboxes` (a
 * database read each), its RSS read from /proc after every window. The first half of the run is
 * the warm-up (V8 grows its heap to the working size of the load: tens of MiB, then it stops);
 * reported: the RSS at the half and at the end, and the requests between. Target: the end within
 * 10 % of the half (a leak grows with the requests served; a warmed heap does not).
 *   npm run bench memory     (or: node bench/memory.ts)
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Duration, Result } from "effect"
import * as fs from "node:fs"
import { parseDuration } from "../packages/config/src/Env.ts"
import { apiMain, mintKey, type Role, startRole, stopRoles } from "./lib/ApiRole.ts"
import { fmt } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { wrk } from "./lib/Wrk.ts"

const WINDOWS = Number(process.env.BENCH_WINDOWS ?? 6)
/** BENCH_WINDOW: one window's length, a duration in the platform's format. */
const WINDOW_MS = Duration.toMillis(Result.getOrThrow(parseDuration(process.env.BENCH_WINDOW ?? "10s")))

const rssMiB = (pid: number) => {
  const line = fs.readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"))!
  return Number(line.split(/\s+/)[1]) / 1024
}

const [nats, pg] = await Promise.all([startNats(), startPostgres()])
useTestEncryptionKeys()
const roles: Array<Role> = []
try {
  const api = await startRole([apiMain()], { DATABASE_URL: pg.url, NATS_URL: nats.url })
  roles.push(api)
  const base = api.url
  const token = await mintKey(base)
  const headers = { authorization: `Bearer ${token}` }
  const samples: Array<number> = []
  const servedBy: Array<number> = []
  let requests = 0
  for (let i = 0; i < WINDOWS; i++) {
    const half = WINDOW_MS / 2
    const runs = await Promise.all([
      wrk({ url: `${base}/v1/auth/me`, headers, durationMs: half, connections: 16 }),
      wrk({ url: `${base}/v1/sandboxes`, headers, durationMs: half, connections: 16 })
    ])
    const failed = runs.reduce((n, r) => n + r.failed, 0)
    if (failed > 0) throw new Error(`${failed} responses were not 2xx`)
    requests += runs.reduce((n, r) => n + r.requests, 0)
    samples.push(rssMiB(api.pid))
    servedBy.push(requests)
    console.log(`  window ${i + 1}: RSS ${fmt(samples.at(-1)!, 1)} MiB after ${fmt(requests)} requests`)
  }
  const halfway = Math.max(0, Math.floor(WINDOWS / 2) - 1)
  const first = samples[halfway]!
  const last = samples.at(-1)!
  record({
    bench: "memory",
    figure: `API RSS after ${fmt(requests)} requests (${fmt(requests - servedBy[halfway]!)} since the half)`,
    value: last,
    unit: "MiB",
    baseline: first,
    baselineName: `at the half, window ${halfway + 1} of ${WINDOWS}`,
    ratio: last / first,
    target: "ratio <= 1.1",
    met: last / first <= 1.1
  })
} finally {
  await stopRoles(roles)
  await Promise.all([nats.stop(), pg.close()])
}
