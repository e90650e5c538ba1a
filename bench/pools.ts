/**
 * Warm pools per template and forks (issue 29, docs/architecture.md#warm-pools and #forks):
 *
 * - create → running (the SDK's create, resolving once running) from a pooled `debian`-based
 *   template with a `start_cmd` (a python http.server, `ready_cmd` a curl of it; `pool_size`
 *   BENCH_POOL_SIZE) against a create from `base` (served by the agent's own pool), alternating,
 *   BENCH_POOL_N of each one after another, each deleted after and each started from a settled
 *   host (both pools full, their last entries given time to boot): p50 ratio, target ≤ 1.2×;
 * - fork of 10 from a sandbox that wrote 200 MiB, wall time until all 10 run, against 10 creates
 *   from `base` at once in the same run (BENCH_FORK_RUNS alternating runs, medians): target ≤ 2×;
 *   and the host's disk growth for the 10 forks (`du` of the agent's data dir, sparse disk images
 *   counted as allocated) against 10 × 200 MiB.
 *
 *   npm run bench pools       (or: node bench/pools.ts; BENCH_POOL_N=15, BENCH_POOL_SIZE=5,
 *                              BENCH_FORK_RUNS=3 (0: none), BENCH_POOL_BASE=debian|base,
 *                              BENCH_POOL_TRACE=1 for the breakdown by span)
 *
 * Against a stack this run starts: a throwaway NATS and Postgres, the API, runtime and agent roles
 * each a process of its own, quotas and the rate limit raised out of the way.
 */
import { TEST_IMAGE_CACHE_DIR } from "@svc/testing/ImageCache"
import { appMain, readyEvent, spawnRole } from "@svc/testing/TestProcess"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import { Svc } from "../packages/sdk/src/index.ts"
import { mintKey, NO_RATE_LIMIT } from "./lib/ApiRole.ts"
import { startControlPlane, startServers } from "./lib/ControlPlane.ts"
import { agentEnv, benchHost, UNBOUNDED_HOST } from "./lib/Hosts.ts"
import { fmt } from "./lib/Measure.ts"
import { otlpEnv, printSpansInWindows, type Receiver, type Span, startReceiver, type Window } from "./lib/Otlp.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"

const N = Number(process.env["BENCH_POOL_N"] ?? 15)
const POOL_SIZE = Number(process.env["BENCH_POOL_SIZE"] ?? 5)
const FORK_RUNS = Number(process.env["BENCH_FORK_RUNS"] ?? 3)
const FORKS = 10
const WRITTEN_MIB = 200
const TEMPLATE = "bench-pooled-web"
/**
 * The pooled template's base: `debian` (a python http.server as its start_cmd, ready once curl
 * answers), or `base` (a file step, so that the `base` pool cannot serve it, and a shell loop as
 * its start_cmd), for a machine where the debian root cannot be built (no network).
 */
const ROOT = process.env["BENCH_POOL_BASE"] === "base" ? "base" : "debian"
/**
 * `BENCH_POOL_TRACE=1`: the roles export their spans to a receiver of this run's, and each
 * measured create's window is broken down by span (where the time of either path goes, and what
 * ran beside it: refills, deletes). Tracing costs both paths alike; the ratio is read from a run
 * without it.
 */
const TRACE = process.env["BENCH_POOL_TRACE"] === "1"

const log = (line: string) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${line}\n`)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The agent's `base` pool (its default `SVC_AGENT_POOL_SIZE`). */
const BASE_POOL_SIZE = 4

/**
 * Pool entries on the host by kind: `pool-*` sandboxes of the `base` root without layers, and
 * the others (the template's: a `debian` root, or `base` with the template's layer). Counted on
 * disk, so entries still being made count too (`settled` gives them time).
 */
const poolEntries = (dataDir: string) => {
  const dir = NodePath.join(dataDir, "sandboxes")
  let base = 0
  let template = 0
  for (const name of FsSync.readdirSync(dir)) {
    if (!name.startsWith("pool-")) continue
    try {
      const json = JSON.parse(FsSync.readFileSync(NodePath.join(dir, name, "sandbox.json"), "utf8"))
      // A template's layers are stacked in its `templateDir` (`<layer>:...:<root>`): only the bare `base` root is `base`'s.
      const dirs = String(json.templateDir).split(":")
      if (dirs.length === 1 && dirs[0]!.endsWith("/templates/base")) base++
      else template++
    } catch {
      // Being written: counted at the next look.
    }
  }
  return { base, template }
}

/** KiB the agent's data dir takes on disk (allocated blocks: sparse images count what they hold). */
const diskKb = (dataDir: string) => Number(execFileSync("du", ["-sk", dataDir], { encoding: "utf8" }).split(/\s/)[0])

const main = Effect.gen(function*() {
  const { nats, pg } = yield* startServers
  const receiver = TRACE
    ? yield* Effect.acquireRelease(Effect.promise(startReceiver), (r) => Effect.promise(r.close))
    : undefined
  const common = {
    ...(receiver !== undefined ? otlpEnv(receiver.url) : {}),
    NATS_URL: nats.url,
    ...NO_RATE_LIMIT,
    SVC_ORG_MAX_SANDBOXES: "100000",
    SVC_ORG_MAX_RUNNING_SANDBOXES: "100000"
  }
  const { base } = yield* startControlPlane({ common, databaseUrl: pg.url })
  const host = yield* benchHost("/tmp/svc-bench-pools-")
  const { dataDir } = host
  yield* spawnRole({
    main: appMain("agent"),
    env: {
      ...common,
      ...agentEnv(nats, host),
      ...UNBOUNDED_HOST,
      SVC_IMAGE_CACHE_DIR: TEST_IMAGE_CACHE_DIR
    },
    ready: readyEvent("agent_ready"),
    timeout: "600 seconds"
  })
  const svc = new Svc({ baseUrl: base, apiKey: yield* Effect.promise(() => mintKey(base)) })
  return yield* Effect.promise(() => measure(svc, dataDir, receiver))
})

interface KindWindow extends Window {
  readonly kind: "base" | "pooled"
}

const printBreakdown = (spans: ReadonlyArray<Span>, windows: ReadonlyArray<KindWindow>) => {
  for (const kind of ["base", "pooled"] as const) {
    const mine = windows.filter((w) => w.kind === kind)
    console.log(
      `\nspans inside the ${kind} creates' windows (${mine.length}; p50 ${
        fmt(median(mine.map((w) => w.end - w.start)))
      } ms):`
    )
    printSpansInWindows(spans, mine, { most: 40, indent: "  " })
  }
}

const now = () => performance.timeOrigin + performance.now()

const measure = async (svc: Svc, dataDir: string, receiver: Receiver | undefined) => {
  // The pooled template: debian, a web server as its start_cmd, ready once it answers.
  log(`template ${TEMPLATE} (${ROOT} with a start_cmd, pool_size ${POOL_SIZE})`)
  const template = await svc.templates.create(
    ROOT === "debian"
      ? {
        name: TEMPLATE,
        base: "debian",
        start_cmd: "python3 -m http.server 8000 --directory /tmp",
        ready_cmd: "curl -sf -o /dev/null http://127.0.0.1:8000/",
        pool_size: POOL_SIZE
      }
      : {
        name: TEMPLATE,
        base: "base",
        steps: [{ file: { path: "/srv/index.html", content: "<h1>pooled</h1>\n" } }],
        start_cmd: "while true; do date > /tmp/alive; sleep 1; done",
        ready_cmd: "test -f /tmp/alive",
        pool_size: POOL_SIZE
      },
    { timeoutMs: 900_000 }
  )
  /**
   * Both pools full again and the host quiet: each measured create, of either kind, starts from
   * there (not one of them while the other's delete and refill still run).
   */
  const settled = async () => {
    for (;;) {
      const entries = poolEntries(dataDir)
      if (entries.template >= POOL_SIZE && entries.base >= BASE_POOL_SIZE) break
      await sleep(100)
    }
    // Made is not yet ready (booted): give the last one its boot (seconds on a loaded machine).
    await sleep(3000)
  }
  await settled()

  const windows: Array<KindWindow> = []
  const createRunning = async (params: Record<string, unknown>, kind?: KindWindow["kind"]) => {
    const t0 = now()
    const sandbox = await svc.sandboxes.create(params, { timeoutMs: 120_000 })
    const t1 = now()
    if (kind !== undefined) windows.push({ kind, start: t0, end: t1 })
    const record = sandbox.record
    await sandbox.delete()
    return { elapsed: t1 - t0, record }
  }
  // Warm-up of both paths.
  await createRunning({})
  await createRunning({ template: TEMPLATE })
  const pooled: Array<number> = []
  const fromBase: Array<number> = []
  let notReady = 0
  for (let i = 0; i < N; i++) {
    await settled()
    fromBase.push((await createRunning({}, "base")).elapsed)
    await settled()
    const made = await createRunning({ template: TEMPLATE }, "pooled")
    if (made.record.runtime_ready !== true) notReady++
    pooled.push(made.elapsed)
  }
  log(
    `create → running: base p50 ${fmt(median(fromBase))} ms, pooled p50 ${fmt(median(pooled))} ms (${
      N - notReady
    }/${N} runtime_ready at running, i.e. from the pool)`
  )
  if (receiver !== undefined) {
    // Spans are exported in batches every 5 s.
    await sleep(7000)
    printBreakdown(receiver.spans, windows)
  }

  // Forks: a source that wrote 200 MiB; 10 forks against 10 creates, alternating (none with
  // BENCH_FORK_RUNS=0: the pooled creates alone).
  await svc.templates.update(template.id, { pool_size: 0 })
  if (FORK_RUNS === 0) return { pooled, fromBase, notReady, forkTimes: [], createTimes: [], growth: [] }
  const source = await svc.sandboxes.create({ disk_gb: 1 }, { timeoutMs: 120_000 })
  const wrote = await source.exec(
    `mkdir -p /data && dd if=/dev/urandom of=/data/blob bs=1M count=${WRITTEN_MIB} && sync`,
    {
      timeoutMs: 300_000
    }
  )
  if (wrote.exit_code !== 0) throw new Error(`write: ${wrote.stderr}`)
  const forkTimes: Array<number> = []
  const createTimes: Array<number> = []
  const growth: Array<number> = []
  for (let run = 0; run < FORK_RUNS; run++) {
    {
      const t0 = performance.now()
      const made = await Promise.all(
        Array.from({ length: FORKS }, () => svc.sandboxes.create({}, { timeoutMs: 120_000 }))
      )
      createTimes.push(performance.now() - t0)
      await Promise.all(made.map((s) => s.delete({ wait: true })))
    }
    {
      const before = diskKb(dataDir)
      const t0 = performance.now()
      const forks = await source.fork({ count: FORKS }, { timeoutMs: 120_000 })
      forkTimes.push(performance.now() - t0)
      growth.push((diskKb(dataDir) - before) / 1024)
      const check = await forks[FORKS - 1]!.exec("stat -c %s /data/blob")
      if (check.stdout.trim() !== String(WRITTEN_MIB * 1024 * 1024)) throw new Error(`fork: ${check.stdout}`)
      await Promise.all(forks.map((s) => s.delete({ wait: true })))
    }
    log(
      `run ${run + 1}: 10 creates ${fmt(createTimes.at(-1)!)} ms, fork of 10 ${fmt(forkTimes.at(-1)!)} ms, disk +${
        fmt(growth.at(-1)!)
      } MiB`
    )
  }
  await source.delete()
  return { pooled, fromBase, notReady, forkTimes, createTimes, growth }
}

Effect.runPromise(Effect.scoped(main)).then(({ createTimes, forkTimes, fromBase, growth, notReady, pooled }) => {
  const ratio = median(pooled) / median(fromBase)
  console.log(
    `\ncreate → running, ${N} of each, alternating (ms): base p50 ${fmt(median(fromBase))}, pooled ${
      fmt(median(pooled))
    } (${fmt(ratio, 2)}×; ${N - notReady}/${N} runtime_ready at running)`
  )
  record({
    bench: "pools",
    figure: `create → running p50, pooled ${ROOT} template with a start_cmd (pool_size ${POOL_SIZE})`,
    value: median(pooled),
    unit: "ms",
    baseline: median(fromBase),
    baselineName: "create from base, same run",
    ratio,
    target: "≤ 1.2×",
    met: ratio <= 1.2,
    runs: N
  })
  if (FORK_RUNS === 0) process.exit()
  const forkRatio = median(forkTimes) / median(createTimes)
  console.log(
    `fork of ${FORKS} from a sandbox with ${WRITTEN_MIB} MiB written, until all run (ms): ${
      forkTimes.map((t) => fmt(t)).join(", ")
    }; ${FORKS} creates: ${createTimes.map((t) => fmt(t)).join(", ")}; disk growth (MiB): ${
      growth.map((g) => fmt(g)).join(", ")
    }`
  )
  record({
    bench: "pools",
    figure: `fork of ${FORKS} (source wrote ${WRITTEN_MIB} MiB), wall until running`,
    value: median(forkTimes),
    unit: "ms",
    baseline: median(createTimes),
    baselineName: `${FORKS} creates from base at once`,
    ratio: forkRatio,
    target: "≤ 2×",
    met: forkRatio <= 2,
    runs: FORK_RUNS
  })
  record({
    bench: "pools",
    figure: `host disk growth for ${FORKS} forks of ${WRITTEN_MIB} MiB written`,
    value: median(growth),
    unit: "MiB",
    baseline: FORKS * WRITTEN_MIB,
    baselineName: `${FORKS} × ${WRITTEN_MIB} MiB (a copy per fork)`,
    ratio: median(growth) / (FORKS * WRITTEN_MIB),
    target: "far below 10 × 200 MiB (≤ 0.25×)",
    met: median(growth) <= 0.25 * FORKS * WRITTEN_MIB,
    runs: FORK_RUNS
  })
  process.exit()
}, (error) => {
  console.error(error)
  process.exit(1)
})
