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
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { appMain, readyEvent, spawnRole } from "@svc/testing/TestProcess"
import { Duration, Effect } from "effect"
import { HttpRouter } from "effect/http"
import * as Fs from "node:fs/promises"
import * as Server from "../apps/api/src/Server.ts"
import { ApiKeys } from "../packages/auth/src/ApiKeys.ts"
import { operatorContext } from "../packages/auth/src/Audit.ts"
import { Orgs } from "../packages/auth/src/Orgs.ts"
import { makeHostId } from "../packages/domain/src/Ids.ts"
import { cleanHost } from "./lib/Hosts.ts"
import { runInProcess } from "./lib/InProcess.ts"
import { record } from "./lib/Report.ts"
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
  const base = yield* serve(HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }))
  const org = yield* (yield* Orgs).create("bench-contexts", operatorContext)
  const key = (yield* (yield* ApiKeys).mint({ orgId: org.id, userId: null, name: "bench" }, operatorContext)).token

  const hostId = makeHostId()
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-host-")),
    (dir) => cleanHost(hostId, dir)
  )
  yield* spawnRole({
    main: appMain("agent"),
    env: {
      NATS_URL: server.url,
      SVC_NATS_PREFIX: server.prefix,
      SVC_HOST_ID: hostId,
      SVC_REGION: "local",
      SVC_AGENT_DATA_DIR: dataDir,
      SVC_IMAGE_CACHE_DIR: TEST_IMAGE_CACHE_DIR
    },
    ready: readyEvent("agent_ready"),
    // A busy machine (other sessions' builds and tests) may take longer than the default minute.
    timeout: Duration.minutes(5)
  })

  const call = (method: string, path: string, body?: object) =>
    Effect.promise(async () => {
      const response = await fetch(`${base}${path}`, {
        method,
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {})
      })
      return { status: response.status, json: await response.json() as Record<string, any> }
    })
  const waitFor = (id: string, state: string) =>
    Effect.gen(function*() {
      // The first debian sandbox of a machine builds its root (minutes).
      for (let i = 0; i < 9000; i++) {
        const { json } = yield* call("GET", `/v1/sandboxes/${id}`)
        if (json.state === state) return
        if (json.state === "error") throw new Error(`sandbox ${id}: error`)
        yield* Effect.sleep("100 millis")
      }
      throw new Error(`sandbox ${id} is not ${state}`)
    })

  const created = yield* call("POST", "/v1/sandboxes", {
    name: "bench-contexts",
    template: "debian",
    region: "local",
    ram_mb: 256
  })
  if (created.status !== 201) throw new Error(`create: ${created.status} ${JSON.stringify(created.json)}`)
  const id = created.json.id as string
  yield* Effect.addFinalizer(() =>
    Effect.gen(function*() {
      yield* call("DELETE", `/v1/sandboxes/${id}`)
      yield* Effect.ignore(waitFor(id, "deleted"))
    })
  )
  yield* waitFor(id, "running")
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
