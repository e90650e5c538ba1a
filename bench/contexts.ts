/**
 * A code context's round trip against an exec (issue 28, "Performance"):
 *   node bench/contexts.ts        (BENCH_RUNS=5, BENCH_CALLS=30)
 *
 * Starts a throwaway NATS and Postgres, the API and the runtime role in this process and a host
 * agent as a child process (the `debian` root from the run's image cache, `@svc/testing/ImageCache`),
 * creates one `debian` sandbox and one python context in it, then alternates, call by call,
 * `POST .../contexts/{ctx}/run {"code": "1+1"}` and `POST .../exec {"cmd": ["true"]}` on kept-alive
 * connections. Each run is BENCH_CALLS of each after 5 of each to warm up; the figures are the
 * medians over runs of each run's p50 and p99, and the ratio context / exec. Target: p50 ≤ 2×.
 * Deletes the sandbox before it exits.
 */
import { TEST_IMAGE_CACHE_DIR } from "@svc/testing/ImageCache"
import * as TestNats from "@svc/testing/TestNats"
import { appMain, readyEvent, spawnRole } from "@svc/testing/TestProcess"
import { Duration, Effect } from "effect"
import { serveApi } from "./lib/Api.ts"
import { agentEnv, benchHost } from "./lib/Hosts.ts"
import { runInProcess } from "./lib/InProcess.ts"
import { record } from "./lib/Report.ts"
import { runningSandbox } from "./lib/Sandboxes.ts"
import { median } from "./lib/Stats.ts"

const RUNS = Number(process.env["BENCH_RUNS"] ?? 5)
const CALLS = Number(process.env["BENCH_CALLS"] ?? 30)

process.env["SVC_RATE_LIMIT_PER_SECOND"] = "100000"
process.env["SVC_RATE_LIMIT_BURST"] = "100000"

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!
}

const platform = Effect.gen(function*() {
  const server = yield* TestNats.TestNatsServer
  const { call } = yield* serveApi("bench-contexts")

  const host = yield* benchHost()
  yield* spawnRole({
    main: appMain("agent"),
    env: { ...agentEnv(server, host), SVC_IMAGE_CACHE_DIR: TEST_IMAGE_CACHE_DIR },
    ready: readyEvent("agent_ready"),
    // A busy machine (other sessions' builds and tests) may take longer than the default minute.
    timeout: Duration.minutes(5)
  })

  // The first debian sandbox of a machine builds its root (minutes): up to 15 minutes.
  const id = yield* runningSandbox(call, {
    name: "bench-contexts",
    template: "debian",
    region: "local",
    ram_mb: 256
  }, 9000)
  const made = yield* call("POST", `/v1/sandboxes/${id}/contexts`, { language: "python" })
  if (made.status !== 201) throw new Error(`context: ${made.status} ${JSON.stringify(made.json)}`)
  const ctx = made.json.id as string

  const timed = (path: string, body: object, check: (json: Record<string, any>) => boolean) =>
    Effect.gen(function*() {
      const t = performance.now()
      const { json, status } = yield* call("POST", path, body)
      const ms = performance.now() - t
      if (status !== 200 || !check(json)) throw new Error(`${path}: ${status} ${JSON.stringify(json)}`)
      return ms
    })
  const run = timed(`/v1/sandboxes/${id}/contexts/${ctx}/run`, { code: "1+1" }, (j) => j.results?.[0]?.data === "2")
  const exec = timed(`/v1/sandboxes/${id}/exec`, { cmd: ["true"] }, (j) => j.exit_code === 0)

  for (let i = 0; i < 5; i++) {
    yield* run
    yield* exec
  }
  const out = {
    runP50: [] as Array<number>,
    runP99: [] as Array<number>,
    execP50: [] as Array<number>,
    execP99: [] as Array<number>
  }
  for (let r = 0; r < RUNS; r++) {
    const runs: Array<number> = []
    const execs: Array<number> = []
    for (let i = 0; i < CALLS; i++) {
      runs.push(yield* run)
      execs.push(yield* exec)
    }
    out.runP50.push(percentile(runs, 50))
    out.runP99.push(percentile(runs, 99))
    out.execP50.push(percentile(execs, 50))
    out.execP99.push(percentile(execs, 99))
  }
  return out
})

const result = await runInProcess(platform)
console.log(`\na python context's run of 1+1 against an exec of true (${RUNS} runs of ${CALLS} calls each)`)
for (const [name, values] of Object.entries(result)) {
  console.log(`  ${name.padEnd(8)} ms: ${values.map((v) => v.toFixed(1)).join(", ")}`)
}
for (const p of ["p50", "p99"] as const) {
  const value = median(p === "p50" ? result.runP50 : result.runP99)
  const baseline = median(p === "p50" ? result.execP50 : result.execP99)
  record({
    bench: "contexts",
    figure: `context run of 1+1, ${p}`,
    value,
    unit: "ms",
    baseline,
    baselineName: `exec of true, ${p}`,
    ratio: value / baseline,
    target: "ratio <= 2",
    met: value / baseline <= 2,
    runs: RUNS
  })
}
