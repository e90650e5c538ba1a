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
 *                               BENCH_TTI_BREAKDOWN=5, BENCH_TTI_HOLD=<file>, BENCH_TTI_PERF=<dir>,
 *                               BENCH_TTI_CPU_PROF=<dir>)
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
 * the template `debian-nodejs` (no pool serves it: every create is a cold boot).
 *
 * Pooled (issue 27's pooled targets): with BENCH_TTI_POOLED (default `sequential,burst`), the
 * same modes again after `PATCH /v1/templates/debian-nodejs {pool_size: BENCH_TTI_N}` (at most 50,
 * the contract's bound): each mode starts once the pool is full again (its entries counted on the
 * agent's disk) and runs as many iterations as the pool holds, so a burst is served from a pool
 * of its size. Rows `pooled sequential` and `pooled burst`.
 *
 * Also: where the time of one create goes (BENCH_TTI_BREAKDOWN creates, one after another: POST
 * answered, → running, the first exec of `true`, `node -v` inside against the same binary on
 * the host), and the CPU each process used per create in each mode (/proc/<pid>/stat before
 * and after), then the same by cgroup: the run's own group (every process of the stack, whoever
 * reaped it) and the sandboxes' groups, beside the machine's kernel time by kind.
 */
import { freePort, startNats, startPostgres } from "@svc/local-servers/Servers"
import { TEST_IMAGE_CACHE_DIR } from "@svc/testing/ImageCache"
import { appMain, readyEvent, spawnRole } from "@svc/testing/TestProcess"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { makeHostId } from "../packages/domain/src/Ids.ts"
import { type Sandbox, Svc } from "../packages/sdk/src/index.ts"
import { mintKey } from "./lib/ApiRole.ts"
import { cleanHost } from "./lib/Hosts.ts"
import { findProcess, fmt, machineBusyMs, processCpuMs, treeCpuMs } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { median, quantile } from "./lib/Stats.ts"

const N = Number(process.env["BENCH_TTI_N"] ?? 20)
const MODES = (process.env["BENCH_TTI_MODES"] ?? "sequential,staggered,burst").split(",")
const BREAKDOWN = Number(process.env["BENCH_TTI_BREAKDOWN"] ?? 5)
const STAGGER_MS = 200
const POOLED = (process.env["BENCH_TTI_POOLED"] ?? "sequential,burst").split(",").filter((m) => m !== "")
const POOL_SIZE = Math.min(50, N)
const TEMPLATE = "debian-nodejs"
const DEBS_DIR = NodePath.join(TEST_IMAGE_CACHE_DIR, "..", "debs-nodejs")
// bookworm's nodejs and what the debian root lacks of its dependencies (apt-cache depends --recurse).
const DEBS = [
  "nodejs",
  "libnode108",
  "libuv1",
  "libc-ares2",
  "libicu72",
  "node-acorn",
  "node-busboy",
  "node-cjs-module-lexer",
  "node-undici",
  "node-xtend"
]

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

/**
 * BENCH_TTI_PERF=<dir>: `perf record` of the whole machine (software clock, 499 Hz, call graphs)
 * during each measured mode, into <dir>/<mode>.data, and its summary printed: the share of the
 * samples by command and the kernel's top functions. The machine's other tenants are in it too
 * (by command name they mostly stand apart). Needs `perf` (Debian's linux-perf) and root.
 */
const PERF = process.env["BENCH_TTI_PERF"]

const perfRecord = async (mode: string) => {
  if (PERF === undefined) return async () => undefined
  FsSync.mkdirSync(PERF, { recursive: true })
  const file = NodePath.join(PERF, `${mode.replace(/ /g, "-")}.data`)
  const { spawn } = await import("node:child_process")
  const child = spawn("perf", ["record", "-q", "-a", "-g", "-e", "cpu-clock", "-F", "499", "-o", file], {
    stdio: ["ignore", "ignore", "inherit"]
  })
  // Not the run's: its own CPU (the samples' writing) stays out of the run's cgroup.
  try {
    FsSync.writeFileSync(NodePath.join(NodePath.dirname(benchGroup), "cgroup.procs"), String(child.pid))
  } catch {
    // No group of the run's own.
  }
  await sleep(500)
  return async () => {
    const ended = new Promise((resolve) => child.once("exit", resolve))
    child.kill("SIGINT")
    await ended
    const report = (sort: string, extra: ReadonlyArray<string> = []) =>
      execFileSync("perf", ["report", "-i", file, "--stdio", "--no-children", "-g", "none", "--sort", sort, ...extra], {
        encoding: "utf8",
        maxBuffer: 64 * 1024 * 1024,
        stdio: ["ignore", "pipe", "ignore"]
      }).split("\n").filter((l) => /^\s+\d/.test(l))
    log(`perf ${mode}: by command\n${report("comm").slice(0, 25).join("\n")}`)
    log(`perf ${mode}: kernel functions\n${report("sym", ["--dsos", "[kernel.kallsyms]"]).slice(0, 40).join("\n")}`)
    return file
  }
}

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
// The template: debian plus Debian's nodejs

const ensureDebs = async (): Promise<ReadonlyArray<string>> => {
  await Fs.mkdir(DEBS_DIR, { recursive: true })
  const have = () => FsSync.readdirSync(DEBS_DIR).filter((f) => f.endsWith(".deb"))
  if (DEBS.some((name) => !have().some((f) => f.startsWith(`${name}_`)))) {
    log(`apt-get download ${DEBS.join(" ")} (bookworm's packages, into ${DEBS_DIR})`)
    // bookworm's own nodejs, not a third-party repository's newer one the host may prefer.
    const version = execFileSync("apt-cache", ["madison", "libnode108"], { encoding: "utf8" }).split("|")[1]!.trim()
    execFileSync("apt-get", ["download", ...DEBS.map((d) => d === "nodejs" ? `nodejs=${version}` : d)], {
      cwd: DEBS_DIR,
      stdio: ["ignore", "ignore", "inherit"]
    })
  }
  return have().map((f) => NodePath.join(DEBS_DIR, f))
}

const buildTemplate = async (svc: Svc, debs: ReadonlyArray<string>) => {
  const existing = await svc.templates.get(TEMPLATE).catch(() => undefined)
  if (existing?.state === "ready") return
  const t0 = performance.now()
  const sandbox = await svc.sandboxes.create({ template: "debian", ram_mb: 512 }, { timeoutMs: 600_000 })
  try {
    await sandbox.exec("mkdir -p /tmp/debs")
    for (const file of debs) {
      await sandbox.files.write(`/tmp/debs/${NodePath.basename(file)}`, new Uint8Array(await Fs.readFile(file)))
    }
    const installed = await sandbox.exec("dpkg -i /tmp/debs/*.deb && rm -rf /tmp/debs && node -v", {
      timeoutMs: 300_000
    })
    if (installed.exit_code !== 0) throw new Error(`dpkg -i: ${installed.stdout}\n${installed.stderr}`)
    await sandbox.snapshot(TEMPLATE, { timeoutMs: 600_000 })
    log(
      `template ${TEMPLATE} (node ${installed.stdout.trim().split("\n").at(-1)}) ready in ${
        fmt((performance.now() - t0) / 1000, 1)
      } s`
    )
  } finally {
    await sandbox.delete().catch(() => undefined)
  }
}

/** The template's `node` binary run on the host (its libraries from the same packages), `node -v` ms. */
const hostNodeTimes = async (debs: ReadonlyArray<string>, runs: number) => {
  const dir = await Fs.mkdtemp(NodePath.join(Os.tmpdir(), "svc-bench-node-"))
  try {
    for (const deb of debs) execFileSync("dpkg-deb", ["-x", deb, dir])
    const env = { LD_LIBRARY_PATH: NodePath.join(dir, "usr/lib/x86_64-linux-gnu"), PATH: "/usr/bin:/bin" }
    const bin = NodePath.join(dir, "usr/bin/node")
    execFileSync(bin, ["-v"], { env })
    const times: Array<number> = []
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now()
      execFileSync(bin, ["-v"], { env })
      times.push(performance.now() - t0)
    }
    return times
  } finally {
    await Fs.rm(dir, { recursive: true, force: true })
  }
}

// ---------------------------------------------------------------------------------------------
// CPU by process

interface Pids {
  readonly api: number
  readonly runtime: number
  readonly agent: number
  readonly postgres: number | undefined
  readonly nats: number | undefined
}

/** The pids below `pid` (children, theirs, ...), from /proc/<pid>/task/<tid>/children. */
const descendants = (pid: number): Array<number> => {
  let tasks: Array<string>
  try {
    tasks = FsSync.readdirSync(`/proc/${pid}/task`)
  } catch {
    return []
  }
  const children = tasks.flatMap((tid) => {
    try {
      return FsSync.readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim().split(" ").filter(Boolean)
        .map(Number)
    } catch {
      return []
    }
  })
  return children.flatMap((child) => [child, ...descendants(child)])
}

/** CPU ms of every process below `pid`, each with what it reaped (the commands that ended there). */
const belowCpuMs = (pid: number) =>
  descendants(pid).reduce((sum, child) => {
    const cpu = processCpuMs(child)
    return sum + cpu.own + cpu.reaped
  }, 0)

/**
 * The run's own cpuacct group (cgroup v1; on v2 the same through `cpu.stat`): this process moves
 * itself there before it starts anything, so that every process of the stack (the roles, NATS,
 * Postgres, the spawner, mkfs, svc-enter, the commands they ran, short-lived or not, reaped by
 * whoever) is counted, and nothing of another tenant's. The sandboxes move themselves into their
 * own groups (`svc-sandboxes/<hostId>/<sandbox>`), counted apart: their parent's usage keeps that
 * of the groups already removed (cpuacct charges up the hierarchy as the time is used).
 */
const CGROUP_ROOT = "/sys/fs/cgroup"
const cgroupV2 = FsSync.existsSync(NodePath.join(CGROUP_ROOT, "cgroup.controllers"))
const benchGroup = cgroupV2
  ? NodePath.join(CGROUP_ROOT, `svc-bench-tti-${process.pid}`)
  : NodePath.join(CGROUP_ROOT, "cpuacct", `svc-bench-tti-${process.pid}`)

const joinBenchGroup = () => {
  try {
    FsSync.mkdirSync(benchGroup)
    FsSync.writeFileSync(NodePath.join(benchGroup, "cgroup.procs"), String(process.pid))
    return true
  } catch (e) {
    log(`no cgroup of the run's own (${e instanceof Error ? e.message : e}): its CPU rows read 0`)
    return false
  }
}

const leaveBenchGroup = () => {
  try {
    const parent = NodePath.dirname(benchGroup)
    FsSync.writeFileSync(NodePath.join(parent, "cgroup.procs"), String(process.pid))
    FsSync.rmdirSync(benchGroup)
  } catch {
    // Still holding a process (a sandbox's monitor left behind): the group stays, harmless.
  }
}

/** {user, system} ms of a cgroup, hierarchically (cpuacct.usage_user/_sys on v1, cpu.stat on v2). */
const groupCpuMs = (dir: string): { readonly user: number; readonly system: number } => {
  try {
    if (cgroupV2) {
      const stat = FsSync.readFileSync(NodePath.join(dir, "cpu.stat"), "utf8")
      const key = (k: string) => Number(new RegExp(`^${k} (\\d+)$`, "m").exec(stat)?.[1] ?? 0)
      return { user: key("user_usec") / 1000, system: key("system_usec") / 1000 }
    }
    const read = (f: string) => Number(FsSync.readFileSync(NodePath.join(dir, f), "utf8")) / 1e6
    return { user: read("cpuacct.usage_user"), system: read("cpuacct.usage_sys") }
  } catch {
    return { user: 0, system: 0 }
  }
}

const sandboxesGroup = (hostId: string) =>
  cgroupV2
    ? NodePath.join(CGROUP_ROOT, "svc-sandboxes", hostId)
    : NodePath.join(CGROUP_ROOT, "cpuacct", "svc-sandboxes", hostId)

/** The machine's busy time by kind (ms, all cores, /proc/stat): user (with nice), system, irq + softirq. */
const machineKinds = () => {
  const cpu = FsSync.readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number)
  return { user: (cpu[0]! + cpu[1]!) * 10, system: cpu[2]! * 10, irq: (cpu[5]! + cpu[6]!) * 10 }
}

let hostIdOfRun = ""

const cpuOf = (pids: Pids) => {
  const agentOwn = processCpuMs(pids.agent).own
  const bench = groupCpuMs(benchGroup)
  const sandboxes = groupCpuMs(sandboxesGroup(hostIdOfRun))
  const kinds = machineKinds()
  return {
    "machine (all cores, every process)": machineBusyMs(),
    "API": processCpuMs(pids.api).own,
    "runtime": processCpuMs(pids.runtime).own,
    "agent (its own process)": agentOwn,
    // Its spawner, the commands it ran and reaped (mkfs, mounts, svc-enter), the sandboxes'
    // processes: the monitors still there and what they reaped; an ended sandbox's whole tree
    // once its parent reaped it.
    "agent's children and sandboxes": belowCpuMs(pids.agent) + processCpuMs(pids.agent).reaped,
    "Postgres (every backend)": pids.postgres !== undefined
      ? treeCpuMs(pids.postgres) + processCpuMs(pids.postgres).reaped
      : 0,
    "NATS": pids.nats !== undefined ? processCpuMs(pids.nats).own : 0,
    "bench (SDK clients)": (process.cpuUsage().user + process.cpuUsage().system) / 1000,
    // The kernel's own threads (kthreadd's children: loop devices, ext4's journal, the network
    // namespaces' and cgroups' teardown, RCU), every one of them, ours or not.
    "kernel threads (all)": treeCpuMs(2),
    // BENCH_TTI_BREAKDOWN's rows: the run's processes by cgroup, whoever reaped them, and the
    // machine's kernel time by kind (not a share of the rows above: a second view of the same time).
    "= the run's cgroup, user (every process but the sandboxes)": bench.user,
    "= the run's cgroup, system": bench.system,
    "= the sandboxes' cgroups, user": sandboxes.user,
    "= the sandboxes' cgroups, system": sandboxes.system,
    "= machine: user": kinds.user,
    "= machine: system": kinds.system,
    "= machine: irq and softirq (loopback TCP's receive side among them)": kinds.irq
  }
}

// ---------------------------------------------------------------------------------------------

const main = Effect.gen(function*() {
  yield* Effect.acquireRelease(Effect.sync(joinBenchGroup), () => Effect.sync(leaveBenchGroup))
  const [nats, pg] = yield* Effect.acquireRelease(
    Effect.promise(() => Promise.all([startNats(), startPostgres()])),
    ([n, p]) => Effect.promise(() => Promise.all([n.stop(), p.close()]))
  )
  const passed = Object.fromEntries(
    Object.entries(process.env).filter((e): e is [string, string] => e[0].startsWith("SVC_") && e[1] !== undefined)
  )
  const common = {
    ...profEnv,
    NATS_URL: nats.url,
    SVC_RATE_LIMIT_PER_SECOND: "100000000",
    SVC_RATE_LIMIT_BURST: "100000000",
    SVC_ORG_MAX_SANDBOXES: "100000",
    SVC_ORG_MAX_RUNNING_SANDBOXES: "100000",
    ...passed
  }
  const port = yield* Effect.promise(freePort)
  const api = yield* spawnRole({
    main: appMain("api"),
    env: { ...common, DATABASE_URL: pg.url, SVC_HOST: "127.0.0.1", SVC_PORT: String(port) },
    ready: readyEvent("api_ready"),
    timeout: "120 seconds"
  })
  const runtime = yield* spawnRole({
    main: appMain("runtime"),
    env: { ...common, DATABASE_URL: pg.url },
    ready: (out) => out.includes("runtime ready") ? true : undefined,
    timeout: "120 seconds"
  })
  const hostId = makeHostId()
  hostIdOfRun = hostId
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-tti-")),
    (dir) => cleanHost(hostId, dir)
  )
  const agent = yield* spawnRole({
    main: appMain("agent"),
    env: {
      ...common,
      SVC_HOST_ID: hostId,
      SVC_AGENT_DATA_DIR: dataDir,
      SVC_HOST_CPU: "100000",
      SVC_HOST_RAM_MB: "100000000",
      SVC_HOST_DISK_GB: "1000000",
      SVC_IMAGE_CACHE_DIR: TEST_IMAGE_CACHE_DIR,
      ...passed
    },
    ready: readyEvent("agent_ready"),
    timeout: "600 seconds"
  })
  const base = `http://127.0.0.1:${port}`
  const apiKey = yield* Effect.promise(() => mintKey(base))
  const svc = new Svc({ baseUrl: base, apiKey })
  const pids: Pids = {
    api: api.process.pid!,
    runtime: runtime.process.pid!,
    agent: agent.process.pid!,
    postgres: findProcess((cmd) => cmd.includes(`-D ${pg.dir}`)),
    nats: findProcess((cmd) => cmd.includes(`-sd ${nats.dir}`))
  }
  const measured = yield* Effect.promise(() => measure(svc, pids, dataDir, { api_url: base, api_key: apiKey }))
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
  return measured
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

const measure = async (
  svc: Svc,
  pids: Pids,
  dataDir: string,
  stack: { readonly api_url: string; readonly api_key: string }
) => {
  const debs = await ensureDebs()
  await buildTemplate(svc, debs)
  // Warm-up: the template's first boot on this host, JIT, connections.
  for (let i = 0; i < 3; i++) await iteration(svc, performance.now())
  if (HOLD !== undefined) await holdFor(stack)

  // Where one create's time goes.
  const parts: Record<string, Array<number>> = {
    "POST /v1/sandboxes answered": [],
    "→ running (the SDK's wait)": [],
    "→ first exec `true` answered": [],
    "    `true`'s duration inside (exec's duration_ms)": [],
    "→ `node -v` answered": [],
    "    `node -v`'s duration inside (exec's duration_ms)": []
  }
  for (let i = 0; i < BREAKDOWN; i++) {
    const t0 = performance.now()
    const sandbox = await svc.sandboxes.create({ template: TEMPLATE, ram_mb: 256 }, { wait: false })
    const t1 = performance.now()
    await sandbox.waitFor("running", { timeoutMs: 120_000 })
    const t2 = performance.now()
    const first = await sandbox.exec(["true"])
    const t3 = performance.now()
    const node = await sandbox.exec(["node", "-v"])
    const t4 = performance.now()
    await sandbox.delete()
    parts["POST /v1/sandboxes answered"]!.push(t1 - t0)
    parts["→ running (the SDK's wait)"]!.push(t2 - t1)
    parts["→ first exec `true` answered"]!.push(t3 - t2)
    parts["    `true`'s duration inside (exec's duration_ms)"]!.push(first.duration_ms)
    parts["→ `node -v` answered"]!.push(t4 - t3)
    parts["    `node -v`'s duration inside (exec's duration_ms)"]!.push(node.duration_ms)
  }
  const hostNode = await hostNodeTimes(debs, 10)

  // CPU of each process per SDK call, on one running sandbox (20 of each, one after another):
  // what a TTI iteration's parts cost apart from the create itself.
  const perCall: Record<string, Record<string, number>> = {}
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
      const before = cpuOf(pids)
      for (let i = 0; i < 20; i++) await call()
      const after = cpuOf(pids)
      perCall[name] = Object.fromEntries(
        Object.entries(after).map(([k, v]) => [k, (v - before[k as keyof typeof before]) / 20])
      )
    }
    await sandbox.delete()
  }

  const results: Record<string, { iterations: ReadonlyArray<Iteration>; cpu: Record<string, number>; load: string }> =
    {}
  for (const mode of MODES) {
    const loadBefore = Os.loadavg()[0]!
    const before = cpuOf(pids)
    log(`${mode}: ${N} sandboxes`)
    const stopPerf = await perfRecord(mode)
    const iterations = await runMode(svc, mode)
    const after = cpuOf(pids)
    await stopPerf()
    const cpu: Record<string, number> = {}
    for (const [name, v] of Object.entries(after)) cpu[name] = (v - before[name as keyof typeof before]) / N
    results[mode] = { iterations, cpu, load: `${fmt(loadBefore, 1)} → ${fmt(Os.loadavg()[0]!, 1)}` }
    const failed = iterations.filter((r) => !r.ok)
    if (failed.length > 0) log(`${mode}: ${failed.length} failed, first: ${failed[0]!.error}`)
    // Let the deletes finish before the next mode.
    await sleep(3000)
  }
  if (POOLED.length > 0) {
    await svc.templates.update(TEMPLATE, { pool_size: POOL_SIZE })
    for (const mode of POOLED) {
      // Full again (made, then a moment for the last one's probe) before each mode.
      while (templateEntries(dataDir) < POOL_SIZE) await sleep(100)
      await sleep(1500)
      const loadBefore = Os.loadavg()[0]!
      const before = cpuOf(pids)
      // As many as the pool holds: past it a create is a cold boot beside the pool's refill.
      log(`pooled ${mode}: ${POOL_SIZE} sandboxes from a pool of ${POOL_SIZE}`)
      const iterations = await runMode(svc, mode, POOL_SIZE)
      const after = cpuOf(pids)
      const cpu: Record<string, number> = {}
      for (const [name, v] of Object.entries(after)) cpu[name] = (v - before[name as keyof typeof before]) / POOL_SIZE
      results[`pooled ${mode}`] = { iterations, cpu, load: `${fmt(loadBefore, 1)} → ${fmt(Os.loadavg()[0]!, 1)}` }
      const failed = iterations.filter((r) => !r.ok)
      if (failed.length > 0) log(`pooled ${mode}: ${failed.length} failed, first: ${failed[0]!.error}`)
      await sleep(3000)
    }
    await svc.templates.update(TEMPLATE, { pool_size: 0 })
  }
  return { parts, hostNode, perCall, results }
}

const ms = (n: number) => fmt(n, 0).padStart(8)

Effect.runPromise(Effect.scoped(main)).then(({ hostNode, parts, perCall, results }) => {
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
  console.log(`\none create, one after another (${BREAKDOWN}), ms${"median".padStart(14)}${"max".padStart(8)}`)
  for (const [name, values] of Object.entries(parts)) {
    console.log(`  ${name.padEnd(50)}${ms(median(values))}${ms(Math.max(...values))}`)
  }
  console.log(`  ${"the same `node -v` on the host".padEnd(50)}${ms(median(hostNode))}${ms(Math.max(...hostNode))}`)
  const names = Object.keys(Object.values(perCall)[0]!).slice(1).filter((n) => !n.startsWith("="))
  console.log(`\nCPU per SDK call on a running sandbox (ms, 20 each): ${names.join(" / ")}`)
  for (const [call, cpu] of Object.entries(perCall)) {
    console.log(`  ${call.padEnd(40)}${names.map((n) => fmt(cpu[n]!, 1).padStart(7)).join("")}`)
  }
  for (const [mode, r] of Object.entries(results)) {
    console.log(`\nCPU per create, ${mode} (ms)`)
    const rows = Object.entries(r.cpu)
    for (const [name, v] of rows) {
      if (!name.startsWith("=")) console.log(`  ${name.padEnd(50)}${fmt(v, 1).padStart(8)}`)
    }
    const [machine, ...named] = rows.filter(([name]) => !name.startsWith("=")).map(([, v]) => v)
    const rest = machine! - named.reduce((a, b) => a + b, 0)
    console.log(`  ${"the rest (other tenants, interrupts)".padEnd(50)}${fmt(rest, 1).padStart(8)}`)
    // By cgroup: every process of the run whoever reaped it, the sandboxes apart, and the machine's
    // kernel time by kind; what none of those holds is other tenants' work (or kernel threads).
    console.log(`  by cgroup and kind (BENCH_TTI_BREAKDOWN):`)
    for (const [name, v] of rows) {
      if (name.startsWith("=")) console.log(`  ${name.slice(2).padEnd(68)}${fmt(v, 1).padStart(8)}`)
    }
    const c = r.cpu
    const ours = c["= the run's cgroup, user (every process but the sandboxes)"]! + c["= the run's cgroup, system"]! +
      c["= the sandboxes' cgroups, user"]! + c["= the sandboxes' cgroups, system"]!
    console.log(`  ${"ours by cgroup, all (run + sandboxes)".padEnd(68)}${fmt(ours, 1).padStart(8)}`)
    console.log(
      `  ${"machine − ours − irq/softirq − kernel threads (other tenants)".padEnd(68)}${
        fmt(
          machine! - ours - c["= machine: irq and softirq (loopback TCP's receive side among them)"]! -
            c["kernel threads (all)"]!,
          1
        ).padStart(8)
      }`
    )
  }
  console.log("")
  for (const [mode, r] of Object.entries(results)) {
    const ok = r.iterations.filter((i) => i.ok)
    const tti = ok.map((i) => i.tti)
    const wall = Math.max(...r.iterations.map((i) => i.endedAt)) - Math.min(...r.iterations.map((i) => i.startedAt))
    const published = PUBLISHED[mode.replace("pooled ", "")]!
    const sequential = results["sequential"]
    const seqMedian = sequential ? median(sequential.iterations.filter((i) => i.ok).map((i) => i.tti)) : Number.NaN
    const target = mode === "pooled sequential"
      ? { text: "≤ 50 ms (pooled)", met: median(tti) <= 50 }
      : mode.startsWith("pooled ")
      ? {
        text: "pooled: ≤ 400 ms median, wall ≤ 1 s, all ok",
        met: median(tti) <= 400 && wall <= 1000 && ok.length === N
      }
      : mode === "sequential"
      ? { text: "≤ 120 ms (unpooled)", met: median(tti) <= 120 }
      : mode === "staggered"
      ? { text: "≤ 1.5× sequential, all ok", met: median(tti) <= 1.5 * seqMedian && ok.length === N }
      : { text: "unpooled: all ok, wall ≤ 5 s", met: ok.length === N && wall <= 5000 }
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
}, (error) => {
  console.error(error)
  process.exit(1)
})
