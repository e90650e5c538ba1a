/**
 * Time to interactive (issue 27), by the method of the public ComputeSDK benchmark
 * (github.com/computesdk/benchmarks, METHODOLOGY.md and src/sandbox/benchmark.ts; none of its code
 * is here): TTI is the time from `create()` to the answer of the first commands, an identity
 * probe (a shell line reading /proc and writing a marker, which must not find one already there)
 * then `node -v`; the sandbox is deleted afterwards, untimed. Three modes:
 *   - sequential: BENCH_TTI_N one after another;
 *   - staggered: BENCH_TTI_N launched 200 ms apart (5/s);
 *   - burst: BENCH_TTI_N at once;
 * each with median, p95, p99, success, the wall clock (first create → last answer) and the first
 * ready (first create → first answer).
 *
 *   npm run bench tti          (or: node bench/tti.ts; BENCH_TTI_N=20, BENCH_TTI_MODES=sequential,staggered,burst,
 *                               BENCH_TTI_POOLED=sequential,burst, BENCH_TTI_BREAKDOWN=5, BENCH_TTI_TRACE=1,
 *                               BENCH_TTI_HOLD=<file>, BENCH_TTI_PERF=<dir>, BENCH_TTI_CPU_PROF=<dir>;
 *                               an empty BENCH_TTI_MODES or BENCH_TTI_POOLED runs none of those modes)
 *
 * Through our SDK (`svc.sandboxes.create()` resolving once running, `exec`, `delete`), against a
 * stack this run starts: a throwaway NATS and Postgres, and the API, runtime and agent roles each
 * a process of its own (so each one's CPU can be read), with the org quotas, the rate limit and the
 * host's capacity raised out of the way. `SVC_*` variables of this process's environment pass to
 * the roles (for example SVC_AGENT_CONCURRENCY, for a before/after of a setting).
 *
 * The template is `debian` plus Debian's own `nodejs` (bookworm's 18.x): the packages the debian
 * root lacks are fetched on this machine with `apt-get download` (cached in .svc/cache/debs-nodejs),
 * written into a `debian` sandbox and installed with `dpkg -i`, and the sandbox is snapshotted as
 * the template `debian-nodejs` (`bench/lib/NodeTemplate.ts`; no pool serves it in the unpooled modes:
 * every create is a cold boot).
 *
 * Pooled (issue 27's pooled targets): with BENCH_TTI_POOLED (default `sequential,burst`), the
 * same modes again after `PATCH /v1/templates/debian-nodejs {pool_size: BENCH_TTI_N}` (at most 50,
 * the contract's bound): each mode starts once the pool is full again (its entries counted on the
 * agent's disk) and runs as many iterations as the pool holds, so a burst is served from a pool
 * of its size. Rows `pooled sequential` and `pooled burst`. The breakdown below is made for
 * pooled creates too (each from a full pool, and whether it took an entry).
 *
 * Also: where the time of one create goes (BENCH_TTI_BREAKDOWN creates, one after another: POST
 * answered, → running, the first exec of `true`, `node -v` inside against the same binary on
 * the host), the floor (the identity probe and `node -v` on an already running sandbox), and the
 * CPU each process used per create in each mode, per process and by cgroup
 * (`bench/lib/CpuAccounting.ts`).
 */
import { TEST_IMAGE_CACHE_DIR } from "@svc/testing/ImageCache"
import { appMain, readyEvent, spawnRole } from "@svc/testing/TestProcess"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as FsSync from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { type Sandbox, Svc } from "../packages/sdk/src/index.ts"
import { mintKey, NO_RATE_LIMIT } from "./lib/ApiRole.ts"
import { startControlPlane, startServers } from "./lib/ControlPlane.ts"
import { makeCpuAccounting, type Pids, printCpu } from "./lib/CpuAccounting.ts"
import { agentEnv, benchHost, UNBOUNDED_HOST } from "./lib/Hosts.ts"
import { findProcess, fmt } from "./lib/Measure.ts"
import { buildTemplate, ensureDebs, hostNodeTimes, NODE_TEMPLATE } from "./lib/NodeTemplate.ts"
import { otlpEnv, printSpansInWindows, type Span, startReceiver } from "./lib/Otlp.ts"
import { record } from "./lib/Report.ts"
import { median, quantile } from "./lib/Stats.ts"

const N = Number(process.env["BENCH_TTI_N"] ?? 20)
const MODES = (process.env["BENCH_TTI_MODES"] ?? "sequential,staggered,burst").split(",").filter((m) => m !== "")
const BREAKDOWN = Number(process.env["BENCH_TTI_BREAKDOWN"] ?? 5)
const STAGGER_MS = 200
const POOLED = (process.env["BENCH_TTI_POOLED"] ?? "sequential,burst").split(",").filter((m) => m !== "")
const POOL_SIZE = Math.min(50, N)
const TEMPLATE = NODE_TEMPLATE

/**
 * BENCH_TTI_HOLD=<file>: once the template is built and warm, write `{api_url, api_key, template}`
 * to <file> (0600) and wait until it is removed, then measure as usual: another harness (the
 * public one, with a provider adapter over our SDK) can run against the same stack in the same
 * window, for a comparison of the two methods' figures.
 */
const HOLD = process.env["BENCH_TTI_HOLD"]

/**
 * BENCH_TTI_CPU_PROF=<dir>: the API, runtime and agent roles run with `--cpu-prof` into <dir>
 * (the whole run, template build included) and are stopped with SIGTERM at the end, so that
 * Node writes the profiles.
 */
const CPU_PROF = process.env["BENCH_TTI_CPU_PROF"]
const profEnv: Record<string, string> = CPU_PROF !== undefined
  ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${CPU_PROF}` }
  : {}

const holdFor = async (stack: { readonly api_url: string; readonly api_key: string }) => {
  FsSync.writeFileSync(HOLD!, JSON.stringify({ ...stack, template: TEMPLATE }), { mode: 0o600 })
  log(`holding: the stack is in ${HOLD}; remove it to go on`)
  while (FsSync.existsSync(HOLD!)) await new Promise((resolve) => setTimeout(resolve, 500))
}

const log = (line: string) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${line}\n`)

/**
 * BENCH_TTI_PERF=<dir>: `perf record` of the whole machine during each measured mode, into
 * <dir>/<mode>.data, and its summary printed (`CpuAccounting.perfRecord`).
 */
const PERF = process.env["BENCH_TTI_PERF"]

/**
 * BENCH_TTI_TRACE=1: the roles export their spans to an OTLP receiver of this run's
 * (bench/lib/Otlp.ts), and the breakdown's creates (unpooled and pooled) are each cut into their
 * parts (the POST, → running, the execs) by the spans that ran in them. Tracing slows every path:
 * read the figures from a run without it.
 */
const TRACE = process.env["BENCH_TTI_TRACE"] === "1"

/** The run's CPU, per process and by cgroup (`bench/lib/CpuAccounting.ts`). */
const cpu = makeCpuAccounting({ name: "svc-bench-tti", log })

/** The published medians (ComputeSDK, May 2026), 100 sandboxes per mode, every one 100/100. */
const PUBLISHED: Record<string, { readonly text: string; readonly best: number; readonly bestName: string }> = {
  sequential: {
    text: "Daytona 186 ms, Archil 311, E2B 491, Vercel 671; best 42",
    best: 186,
    bestName: "Daytona, May 2026"
  },
  staggered: { text: "Daytona 210 ms, E2B 454", best: 210, bestName: "Daytona, May 2026" },
  burst: { text: "Daytona 367 ms (wall 896), E2B 822 (wall 1,590)", best: 367, bestName: "Daytona, May 2026" }
}

// ---------------------------------------------------------------------------------------------
// One iteration, as the public harness does it

const probeLine = (token: string) =>
  [
    "m=''; for p in /tmp/.bench_marker /var/tmp/.bench_marker; do [ -f \"$p\" ] && m=$p; done",
    "echo marker=$m",
    "echo ns_mnt=$(readlink /proc/self/ns/mnt)",
    "echo ns_pid=$(readlink /proc/self/ns/pid)",
    "echo cgroup=$(sha256sum < /proc/self/cgroup | cut -d' ' -f1)",
    "echo boot_id=$(cat /proc/sys/kernel/random/boot_id)",
    "echo pid1=$(tr -d '\\0' < /proc/1/cmdline)",
    "echo uptime=$(cut -d' ' -f1 /proc/uptime)",
    `printf %s '${token}' > /tmp/.bench_marker`,
    `printf %s '${token}' > /var/tmp/.bench_marker`
  ].join("; ")

interface Iteration {
  readonly ok: boolean
  readonly error?: string
  /** ms since the mode's start. */
  readonly startedAt: number
  readonly endedAt: number
  readonly tti: number
}

const iteration = async (svc: Svc, origin: number): Promise<Iteration> => {
  const startedAt = performance.now()
  let sandbox: Sandbox | undefined
  try {
    sandbox = await svc.sandboxes.create({ template: TEMPLATE, ram_mb: 256 }, { timeoutMs: 120_000 })
    const probe = await sandbox.exec(probeLine(`${process.pid}:${Math.random().toString(36).slice(2)}`))
    if (probe.exit_code !== 0) throw new Error(`identity probe: exit ${probe.exit_code}: ${probe.stderr}`)
    if (!/^marker=$/m.test(probe.stdout)) throw new Error(`a marker was already there: ${probe.stdout}`)
    const node = await sandbox.exec("node -v")
    if (node.exit_code !== 0 || !node.stdout.startsWith("v")) {
      throw new Error(`node -v: exit ${node.exit_code}: ${node.stderr}`)
    }
    const endedAt = performance.now()
    return { ok: true, startedAt: startedAt - origin, endedAt: endedAt - origin, tti: endedAt - startedAt }
  } catch (e) {
    const endedAt = performance.now()
    return {
      ok: false,
      error: e instanceof Error ? e.message : String(e),
      startedAt: startedAt - origin,
      endedAt: endedAt - origin,
      tti: endedAt - startedAt
    }
  } finally {
    if (sandbox !== undefined) await sandbox.delete().catch((e) => log(`delete ${sandbox!.id}: ${e}`))
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const runMode = async (svc: Svc, mode: string, count: number = N): Promise<ReadonlyArray<Iteration>> => {
  const origin = performance.now()
  if (mode === "sequential") {
    const out: Array<Iteration> = []
    for (let i = 0; i < count; i++) out.push(await iteration(svc, origin))
    return out
  }
  if (mode === "staggered") {
    return Promise.all(
      Array.from({ length: count }, (_, i) => sleep(i * STAGGER_MS).then(() => iteration(svc, origin)))
    )
  }
  return Promise.all(Array.from({ length: count }, () => iteration(svc, origin)))
}

// ---------------------------------------------------------------------------------------------
// The stack

const main = Effect.gen(function*() {
  yield* Effect.acquireRelease(Effect.sync(cpu.join), () => Effect.sync(cpu.leave))
  const { nats, pg } = yield* startServers
  const receiver = TRACE
    ? yield* Effect.acquireRelease(Effect.promise(startReceiver), (r) => Effect.promise(r.close))
    : undefined
  const passed = Object.fromEntries(
    Object.entries(process.env).filter((e): e is [string, string] => e[0].startsWith("SVC_") && e[1] !== undefined)
  )
  const common = {
    ...profEnv,
    ...(receiver !== undefined ? otlpEnv(receiver.url) : {}),
    NATS_URL: nats.url,
    ...NO_RATE_LIMIT,
    SVC_ORG_MAX_SANDBOXES: "100000",
    SVC_ORG_MAX_RUNNING_SANDBOXES: "100000",
    ...passed
  }
  const { api, base, runtime } = yield* startControlPlane({ common, databaseUrl: pg.url })
  const host = yield* benchHost("/tmp/svc-bench-tti-")
  const { dataDir, hostId } = host
  const agent = yield* spawnRole({
    main: appMain("agent"),
    env: {
      ...common,
      ...agentEnv(nats, host),
      ...UNBOUNDED_HOST,
      SVC_IMAGE_CACHE_DIR: TEST_IMAGE_CACHE_DIR,
      ...passed
    },
    ready: readyEvent("agent_ready"),
    timeout: "600 seconds"
  })
  const apiKey = yield* Effect.promise(() => mintKey(base))
  const svc = new Svc({ baseUrl: base, apiKey })
  const pids: Pids = {
    api: api.process.pid!,
    runtime: runtime.process.pid!,
    agent: agent.process.pid!,
    postgres: findProcess((cmd) => cmd.includes(`-D ${pg.dir}`)),
    nats: findProcess((cmd) => cmd.includes(`-sd ${nats.dir}`))
  }
  const measured = yield* Effect.promise(() =>
    measure({ svc, read: () => cpu.read(pids, hostId), dataDir, stack: { api_url: base, api_key: apiKey } })
  )
  // What the agent said of its pools: a hand-out that failed falls back to a cold boot.
  const agentLog = agent.output()
  const poolWarnings = {
    "a warm pool entry could not be used": agentLog.split("a warm pool entry could not be used").length - 1,
    "could not make a warm pool entry": agentLog.split("could not make a warm pool entry").length - 1,
    "a template's warm pool could not be prepared": agentLog.split("a template's warm pool could not be prepared")
      .length - 1
  }
  if (receiver !== undefined) {
    // Spans are exported in batches every 5 s.
    yield* Effect.promise(() => sleep(7000))
  }
  if (CPU_PROF !== undefined) {
    // A role ended by SIGTERM exits by itself, and Node writes its profile on the way out.
    yield* Effect.promise(() =>
      Promise.all([agent, runtime, api].map((role) =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 20_000)
          role.process.once("exit", () => {
            clearTimeout(timer)
            resolve()
          })
          role.process.kill("SIGTERM")
        })
      ))
    )
  }
  return { ...measured, poolWarnings, spans: receiver?.spans ?? [] }
})

/** The template's pool entries on the agent's disk (`pool-*` sandboxes not of the `base` root). */
const templateEntries = (dataDir: string) => {
  const dir = NodePath.join(dataDir, "sandboxes")
  return FsSync.readdirSync(dir).filter((name) => {
    if (!name.startsWith("pool-")) return false
    try {
      return JSON.parse(FsSync.readFileSync(NodePath.join(dir, name, "sandbox.json"), "utf8")).template !== "base"
    } catch {
      return false
    }
  }).length
}

// ---------------------------------------------------------------------------------------------
// Where one create's time goes

const PARTS = {
  post: "POST /v1/sandboxes answered",
  running: "→ running (the SDK's wait)",
  first: "→ first exec `true` answered",
  firstInside: "    `true`'s duration inside (exec's duration_ms)",
  node: "→ `node -v` answered",
  nodeInside: "    `node -v`'s duration inside (exec's duration_ms)"
} as const

/** One create's parts, in ms since the epoch (for the spans that ran in them). */
interface Window {
  readonly kind: string
  readonly start: number
  /** The POST answered. */
  readonly posted: number
  readonly running: number
  readonly end: number
}

const now = () => performance.timeOrigin + performance.now()

/**
 * `count` creates one after another, each split into its parts (`before` runs ahead of each, out
 * of the timing). `served`: whether a template pool entry was consumed by the create (counted on
 * the agent's disk before the POST and once running; its refill starts later, REFILL_DELAY_MS).
 */
const breakdown = async (
  svc: Svc,
  kind: string,
  count: number,
  options: { readonly before?: () => Promise<void>; readonly entries?: () => number } = {}
) => {
  const parts: Record<string, Array<number>> = Object.fromEntries(Object.values(PARTS).map((name) => [name, []]))
  const windows: Array<Window> = []
  let served = 0
  for (let i = 0; i < count; i++) {
    await options.before?.()
    const entriesBefore = options.entries?.()
    const t0 = now()
    const sandbox = await svc.sandboxes.create({ template: TEMPLATE, ram_mb: 256 }, { wait: false })
    const t1 = now()
    await sandbox.waitFor("running", { timeoutMs: 120_000 })
    const t2 = now()
    const entriesAfter = options.entries?.()
    const first = await sandbox.exec(["true"])
    const t3 = now()
    const node = await sandbox.exec(["node", "-v"])
    const t4 = now()
    await sandbox.delete()
    if (entriesBefore !== undefined && entriesAfter !== undefined && entriesAfter < entriesBefore) served++
    windows.push({ kind, start: t0, posted: t1, running: t2, end: t4 })
    parts[PARTS.post]!.push(t1 - t0)
    parts[PARTS.running]!.push(t2 - t1)
    parts[PARTS.first]!.push(t3 - t2)
    parts[PARTS.firstInside]!.push(first.duration_ms)
    parts[PARTS.node]!.push(t4 - t3)
    parts[PARTS.nodeInside]!.push(node.duration_ms)
  }
  return { parts, windows, served }
}

/** Waits until the template's pool is full again, then a moment for the last entry's probe. */
const poolFull = async (dataDir: string, size: number) => {
  while (templateEntries(dataDir) < size) await sleep(100)
  await sleep(1500)
}

// ---------------------------------------------------------------------------------------------
// The measurement

interface ModeResult {
  readonly iterations: ReadonlyArray<Iteration>
  /** The mode's start, ms since the epoch (the iterations' times are from it). */
  readonly epoch: number
  readonly cpu: Record<string, number>
  readonly load: string
}

const measure = async (options: {
  readonly svc: Svc
  readonly read: () => Record<string, number>
  readonly dataDir: string
  readonly stack: { readonly api_url: string; readonly api_key: string }
}) => {
  const { dataDir, read, svc } = options
  const debs = await ensureDebs(log)
  await buildTemplate(svc, debs, log)
  // Warm-up: the template's first boot on this host, JIT, connections.
  for (let i = 0; i < 3; i++) await iteration(svc, performance.now())
  if (HOLD !== undefined) await holdFor(options.stack)

  const unpooledParts = await breakdown(svc, "unpooled", BREAKDOWN)
  const hostNode = await hostNodeTimes(debs, 10)

  // CPU of each process per SDK call, on one running sandbox (20 of each, one after another):
  // what a TTI iteration's parts cost apart from the create itself. Then the floor: an
  // iteration's commands (the identity probe, `node -v`) on that already running sandbox.
  const perCall: Record<string, Record<string, number>> = {}
  const floor: Array<number> = []
  {
    const sandbox = await svc.sandboxes.create({ template: TEMPLATE, ram_mb: 256 }, { timeoutMs: 120_000 })
    const calls: Record<string, () => Promise<unknown>> = {
      "exec `true`": () => sandbox.exec(["true"]),
      "exec `node -v`": () => sandbox.exec(["node", "-v"]),
      "waitFor running (already running)": () => sandbox.waitFor("running"),
      "GET the record": () => sandbox.refresh()
    }
    for (const [name, call] of Object.entries(calls)) {
      await call()
      const before = read()
      for (let i = 0; i < 20; i++) await call()
      perCall[name] = cpu.perRun(before, read(), 20)
    }
    for (let i = 0; i < 10; i++) {
      // The last one's marker removed first (untimed): the probe must not find one.
      await sandbox.exec("rm -f /tmp/.bench_marker /var/tmp/.bench_marker")
      const t0 = performance.now()
      await sandbox.exec(probeLine(`floor:${i}`))
      await sandbox.exec("node -v")
      floor.push(performance.now() - t0)
    }
    await sandbox.delete()
  }

  const results: Record<string, ModeResult> = {}
  const runMeasured = async (name: string, mode: string, count: number) => {
    const loadBefore = Os.loadavg()[0]!
    const before = read()
    log(`${name}: ${count} sandboxes`)
    const stopPerf = await cpu.perfRecord(PERF, name)
    const epoch = now()
    const iterations = await runMode(svc, mode, count)
    const after = read()
    await stopPerf()
    results[name] = {
      iterations,
      epoch,
      cpu: cpu.perRun(before, after, count),
      load: `${fmt(loadBefore, 1)} → ${fmt(Os.loadavg()[0]!, 1)}`
    }
    const failed = iterations.filter((r) => !r.ok)
    if (failed.length > 0) log(`${name}: ${failed.length} failed, first: ${failed[0]!.error}`)
    // Let the deletes finish before the next mode.
    await sleep(3000)
  }
  for (const mode of MODES) await runMeasured(mode, mode, N)

  let pooledParts: Awaited<ReturnType<typeof breakdown>> | undefined
  if (POOLED.length > 0) {
    await svc.templates.update(TEMPLATE, { pool_size: POOL_SIZE })
    if (BREAKDOWN > 0) {
      // The same parts for pooled creates, each from a full pool.
      pooledParts = await breakdown(svc, "pooled", BREAKDOWN, {
        before: () => poolFull(dataDir, POOL_SIZE),
        entries: () => templateEntries(dataDir)
      })
    }
    for (const mode of POOLED) {
      await poolFull(dataDir, POOL_SIZE)
      // As many as the pool holds: past it a create is a cold boot beside the pool's refill.
      await runMeasured(`pooled ${mode}`, mode, POOL_SIZE)
    }
    await svc.templates.update(TEMPLATE, { pool_size: 0 })
  }
  return { unpooledParts, pooledParts, hostNode, floor, perCall, results }
}

// ---------------------------------------------------------------------------------------------
// The report

const ms = (n: number) => fmt(n, 0).padStart(8)

const printParts = (title: string, parts: Record<string, ReadonlyArray<number>>) => {
  console.log(`\n${title}${"median".padStart(14)}${"max".padStart(8)}`)
  for (const [name, values] of Object.entries(parts)) {
    console.log(`  ${name.padEnd(50)}${ms(median(values))}${ms(Math.max(...values))}`)
  }
}

/** The spans inside each part of the windows of one kind. */
const printSpans = (spans: ReadonlyArray<Span>, windows: ReadonlyArray<Window>) => {
  const kind = windows[0]?.kind
  const cuts: Record<string, (w: Window) => { start: number; end: number }> = {
    "POST": (w) => ({ start: w.start, end: w.posted }),
    "POST answered → running": (w) => ({ start: w.posted, end: w.running }),
    "running → both execs answered": (w) => ({ start: w.running, end: w.end })
  }
  for (const [part, cut] of Object.entries(cuts)) {
    const mine = windows.map(cut)
    console.log(
      `\n  spans in the ${kind} creates' ${part} (${mine.length}; p50 ${
        fmt(median(mine.map((w) => w.end - w.start)))
      } ms):`
    )
    printSpansInWindows(spans, mine, { most: 25, indent: "    " })
  }
}

/** Every span that ran between a create's POST and its `running` (the last window of a kind), in the order they started. */
const printTimeline = (spans: ReadonlyArray<Span>, windows: ReadonlyArray<Window>) => {
  const w = windows.at(-1)
  if (w === undefined) return
  console.log(
    `\n  timeline of the last ${w.kind} create (ms from its POST; answered at ${fmt(w.posted - w.start)}, running at ${
      fmt(w.running - w.start)
    }): start  end  span`
  )
  const inside = spans.filter((span) => span.end > w.start && span.start < w.running).sort((a, b) => a.start - b.start)
  for (const span of inside.slice(0, 80)) {
    console.log(
      `    ${fmt(span.start - w.start).padStart(5)} ${fmt(span.end - w.start).padStart(5)}  ${
        span.service.replace(/^svc-/, "")
      } ${span.name}`
    )
  }
}

Effect.runPromise(Effect.scoped(main)).then(
  ({ floor, hostNode, perCall, poolWarnings, pooledParts, results, spans, unpooledParts }) => {
    const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim()
    console.log(
      `\ntime to interactive, template ${TEMPLATE} (${Os.cpus().length} cores, commit ${commit}, ${
        new Date().toISOString().slice(0, 16)
      } UTC)`
    )
    console.log(
      `${"mode".padEnd(18)}${"median".padStart(8)}${"p95".padStart(8)}${"p99".padStart(8)}${"ok".padStart(8)}${
        "wall".padStart(8)
      }${"first".padStart(8)}  load average`
    )
    for (const [mode, r] of Object.entries(results)) {
      const ok = r.iterations.filter((i) => i.ok)
      const tti = ok.map((i) => i.tti)
      const wall = Math.max(...r.iterations.map((i) => i.endedAt)) - Math.min(...r.iterations.map((i) => i.startedAt))
      const first = Math.min(...ok.map((i) => i.endedAt))
      console.log(
        `${mode.padEnd(18)}${ms(median(tti))}${ms(quantile(tti, 0.95))}${ms(quantile(tti, 0.99))}${
          `${ok.length}/${r.iterations.length}`.padStart(8)
        }${ms(wall)}${ms(first)}  ${r.load}`
      )
    }
    if (BREAKDOWN > 0) {
      printParts(`one create, one after another (${BREAKDOWN}), ms`, unpooledParts.parts)
      console.log(`  ${"the same `node -v` on the host".padEnd(50)}${ms(median(hostNode))}${ms(Math.max(...hostNode))}`)
      if (pooledParts !== undefined) {
        printParts(
          `one pooled create, one after another, each from a full pool (${BREAKDOWN}; ${pooledParts.served} took an entry), ms`,
          pooledParts.parts
        )
      }
    }
    console.log(
      `\nthe floor: the identity probe and \`node -v\` on an already running sandbox (10), ms: median ${
        fmt(median(floor))
      }, max ${fmt(Math.max(...floor))}`
    )
    console.log(
      `the agent's pool warnings: ${Object.entries(poolWarnings).map(([k, v]) => `${k}: ${v}`).join("; ")}`
    )
    if (spans.length > 0) {
      printSpans(spans, unpooledParts.windows)
      printTimeline(spans, unpooledParts.windows)
      if (pooledParts !== undefined) {
        printSpans(spans, pooledParts.windows)
        printTimeline(spans, pooledParts.windows)
      }
      // Each iteration of a mode, create to both answers: what ran beside the creates (a pool's refills).
      for (const [mode, r] of Object.entries(results)) {
        const windows = r.iterations.map((i) => ({ start: r.epoch + i.startedAt, end: r.epoch + i.endedAt }))
        console.log(`\n  spans in the ${mode} iterations (${windows.length}):`)
        printSpansInWindows(spans, windows, { most: 25, indent: "    " })
      }
    }
    const names = Object.keys(Object.values(perCall)[0]!).slice(1).filter((n) => !n.startsWith("="))
    console.log(`\nCPU per SDK call on a running sandbox (ms, 20 each): ${names.join(" / ")}`)
    for (const [call, cpu] of Object.entries(perCall)) {
      console.log(`  ${call.padEnd(40)}${names.map((n) => fmt(cpu[n]!, 1).padStart(7)).join("")}`)
    }
    for (const [mode, r] of Object.entries(results)) printCpu(mode, r.cpu, fmt)
    console.log("")
    for (const [mode, r] of Object.entries(results)) {
      const ok = r.iterations.filter((i) => i.ok)
      const tti = ok.map((i) => i.tti)
      const wall = Math.max(...r.iterations.map((i) => i.endedAt)) - Math.min(...r.iterations.map((i) => i.startedAt))
      const all = ok.length === r.iterations.length
      const published = PUBLISHED[mode.replace("pooled ", "")]!
      const sequential = results["sequential"]
      const seqMedian = sequential ? median(sequential.iterations.filter((i) => i.ok).map((i) => i.tti)) : Number.NaN
      const target = mode === "pooled sequential"
        ? { text: "≤ 50 ms (pooled)", met: median(tti) <= 50 }
        : mode.startsWith("pooled ")
        ? { text: "pooled: ≤ 400 ms median, wall ≤ 1 s, all ok", met: median(tti) <= 400 && wall <= 1000 && all }
        : mode === "sequential"
        ? { text: "≤ 120 ms (unpooled)", met: median(tti) <= 120 }
        : mode === "staggered"
        ? { text: "≤ 1.5× sequential, all ok", met: median(tti) <= 1.5 * seqMedian && all }
        : { text: "unpooled: all ok, wall ≤ 5 s", met: all && wall <= 5000 }
      record({
        bench: "tti",
        figure: `${mode} TTI median (${ok.length}/${r.iterations.length} ok, p95 ${fmt(quantile(tti, 0.95))}, wall ${
          fmt(wall)
        } ms; published: ${published.text})`,
        value: median(tti),
        unit: "ms",
        baseline: published.best,
        baselineName: published.bestName,
        ratio: median(tti) / published.best,
        target: target.text,
        met: target.met
      })
    }
    process.exit()
  },
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
