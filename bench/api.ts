/**
 * The API's hot path against the machine (issue 17): `wrk -t1 -c32` (a native load generator)
 * against
 *   - a raw node:http server in a process of its own (the baseline),
 *   - the API role alone (`node apps/api/src/main.ts`, its own process): `GET /v1/health` and an
 *     authenticated `GET /v1/auth/me` (a real key, verified through the credential cache),
 *   - `svc dev` (every role in one process, the agent and its warm pool included):
 *     `GET /v1/auth/me`.
 * Also the framework's floor: Effect's HttpRouter with nothing of ours (bench/lib/effect-server.ts)
 * against the same baseline, so that the gap splits into the framework's and ours.
 * Baseline and subject alternate run by run; medians of BENCH_RUNS (3) runs of BENCH_DURATION
 * (3s). Target: authenticated GET >= 0.5 of raw.
 * BENCH_CPU_PROF=<dir>: the API role runs under `node --cpu-prof` and writes its profile there on
 * exit (open it in Chrome's DevTools), to see where a request's time goes.
 *   npm run bench api     (or: node bench/api.ts)
 */
import { freePort, startNats, startPostgres, waitForPort } from "@svc/local-servers/Servers"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Duration, Result } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { parseDuration } from "../packages/config/src/Env.ts"
import { startEffectServer, startRawServer } from "./lib/Baselines.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"
import { wrk, type WrkResult } from "./lib/Wrk.ts"

const CONNECTIONS = 32
/** BENCH_DURATION: run length, a duration in the platform's format (`3s`, `500ms`). */
const DURATION_MS = Duration.toMillis(Result.getOrThrow(parseDuration(process.env.BENCH_DURATION ?? "3s")))
const RUNS = Number(process.env.BENCH_RUNS ?? 3)
/** The throughput of the server, not of the per-key rate limit: raised for this run. */
const NO_RATE_LIMIT = {
  SVC_RATE_LIMIT_PER_SECOND: "100000000",
  SVC_RATE_LIMIT_BURST: "100000000"
}

const [nats, pg] = await Promise.all([startNats(), startPostgres()])
useTestEncryptionKeys()
const children: Array<ChildProcess> = []
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-bench-api-"))

const start = async (args: ReadonlyArray<string>, env: Record<string, string>, port: number) => {
  const child = spawn(process.execPath, args, {
    env: {
      ...process.env,
      ...NO_RATE_LIMIT,
      DATABASE_URL: pg.url,
      NATS_URL: nats.url,
      SVC_PORT: String(port),
      SVC_HOST: "127.0.0.1",
      ...env
    },
    stdio: ["ignore", "ignore", "inherit"]
  })
  children.push(child)
  await waitForPort(port, 120_000, child)
  return `http://127.0.0.1:${port}`
}

/** Signs up and mints a `*` key with the session, as a user would. */
const mintKey = async (base: string): Promise<string> => {
  const email = `bench-${Date.now()}-${Math.random().toString(36).slice(2)}@example.com`
  const up = await fetch(`${base}/v1/auth/sign-up`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password: "a benchmark password", org_name: "bench" })
  })
  if (up.status !== 201) throw new Error(`sign-up answered ${up.status}`)
  const cookie = up.headers.get("set-cookie")!.split(";")[0]!
  const key = await fetch(`${base}/v1/auth/api-keys`, {
    method: "POST",
    headers: { "content-type": "application/json", cookie, origin: base },
    body: JSON.stringify({ name: "bench" })
  })
  if (key.status !== 201) throw new Error(`mint answered ${key.status}`)
  return ((await key.json()) as { token: string }).token
}

/** Alternates baseline and subject runs so that drift hits both alike; records the medians. */
const compare = async (
  figure: string,
  rawUrl: string,
  subject: Parameters<typeof wrk>[0],
  target: number | undefined = 0.5
) => {
  const base: Array<WrkResult> = []
  const subj: Array<WrkResult> = []
  await wrk({ url: rawUrl, durationMs: 1000, connections: CONNECTIONS }) // warm-up: JIT, sockets
  await wrk({ ...subject, durationMs: 1000 })
  for (let i = 0; i < RUNS; i++) {
    base.push(await wrk({ url: rawUrl, durationMs: DURATION_MS, connections: CONNECTIONS }))
    subj.push(await wrk({ ...subject, durationMs: DURATION_MS }))
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
    ...(target === undefined ? {} : { target: `ratio >= ${target}`, met: s / b >= target }),
    runs: RUNS
  })
  console.log(
    `    p50 ${median(subj.map((r) => r.p50)).toFixed(2)} ms, p99 ${median(subj.map((r) => r.p99)).toFixed(2)} ms;` +
      ` raw p50 ${median(base.map((r) => r.p50)).toFixed(2)} ms`
  )
}

try {
  const raw = await startRawServer("raw")
  const profile = process.env.BENCH_CPU_PROF ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : []
  const api = await start(
    [...profile, new URL("../apps/api/src/main.ts", import.meta.url).pathname],
    {},
    await freePort()
  )
  const token = await mintKey(api)
  const auth = { authorization: `Bearer ${token}` }
  console.log(`wrk -t1 -c${CONNECTIONS}, ${DURATION_MS} ms per run, each server in its own process`)
  const effect = await startEffectServer()
  await compare(
    "Effect HttpRouter alone (the framework's floor)",
    raw.url,
    { url: effect.url, durationMs: 0 },
    undefined
  )
  await effect.stop()
  await compare("API role alone: GET /v1/health", raw.url, { url: `${api}/v1/health`, durationMs: 0 })
  await compare("API role alone: authenticated GET /v1/auth/me", raw.url, {
    url: `${api}/v1/auth/me`,
    headers: auth,
    durationMs: 0
  })
  const dev = await start(
    [new URL("../apps/cli/src/main.ts", import.meta.url).pathname, "dev"],
    { SVC_STATE_DIR: stateDir, SVC_DATA_DIR: path.join(stateDir, "agent") },
    await freePort()
  )
  const devKey = await mintKey(dev)
  await compare("svc dev: authenticated GET /v1/auth/me", raw.url, {
    url: `${dev}/v1/auth/me`,
    headers: { authorization: `Bearer ${devKey}` },
    durationMs: 0
  })
  await raw.stop()
} finally {
  for (const child of children) child.kill("SIGTERM")
  await Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once("exit", r)))))
  await Promise.all([nats.stop(), pg.close()])
  fs.rmSync(stateDir, { recursive: true, force: true })
}
