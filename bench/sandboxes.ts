/**
 * Sandbox create → running through the whole platform, against bare bubblewrap in the same run.
 *   node bench/sandboxes.ts        (BENCH_SANDBOXES=200, BENCH_BURST=200, BENCH_CONCURRENCY=16,
 *                                   BENCH_CONCURRENT_ROUNDS=10)
 *
 * Starts a throwaway NATS and Postgres (with commit timestamps), the API and the runtime role in
 * this process and a host agent as a child process (so its memory can be read alone), then
 * measures:
 *   - the floor: a bare `bwrap` start of the same `base` root file system until its shell runs,
 *     then one `nsenter` exec of echo (nothing of ours), 50 in a row; and our driver alone
 *     (start → first successful exec through the driver, bench/driver.ts's measurement);
 *   - latency: POST /v1/sandboxes answered → its `sandbox.state_updated` running event read back
 *     from the EVENTS stream, BENCH_SANDBOXES sandboxes one after the other, p50 and p99, by how
 *     the host made them (pool restore or cold boot), and where the time goes: each outbox row's
 *     writing transaction's commit time (Postgres's `pg_xact_commit_timestamp`, through a column
 *     this run adds to its own database), when its message reached the bus (a subscription of this
 *     process), the agent's report time; so each relay hop is commit → on the bus;
 *   - 8 clients at once, each creating BENCH_CONCURRENT_ROUNDS sandboxes one after another;
 *   - throughput: BENCH_BURST creates from BENCH_CONCURRENCY clients at once, first POST → last
 *     running event, in creates per second, with the same breakdown;
 *   - over the burst, CPU per create: the whole machine (/proc/stat), this process (API +
 *     runtime), the agent, its spawner, the commands it started and reaped (`svc-enter`, `mkfs`...,
 *     not the sandboxes' bubblewrap, which runs on), Postgres, NATS;
 *     figures other load on the machine barely moves, unlike the creates per second;
 *   - memory per idle sandbox with BENCH_SANDBOXES running: its own processes (inside, and the
 *     host-side bubblewrap), and what the host pays beyond them (the agent process's growth,
 *     the cgroup's kernel charge beyond the processes);
 *   - with BENCH_AGENT_CPU_PROF=<dir>, the agent runs with `--cpu-prof` and leaves its profile
 *     (the whole run, not only the burst) in that folder when it stops;
 *   - with BENCH_STRACE=1, the processes started per create in the burst, counted by `strace -f`
 *     on the agent (and its spawner): forks of the agent itself, all process starts (fork, vfork,
 *     clone without CLONE_THREAD), execs. strace slows what it traces: the timings of such a run
 *     are not comparable.
 * Ends with its rows for `npm run bench`'s table (bench/lib/Report.ts). Deletes everything it
 * made (and the host's folders and cgroups) before it exits.
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { spawn } from "node:child_process"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import * as Runtime from "../apps/runtime/src/Runtime.ts"
import * as AuthLayer from "../packages/auth/src/AuthLayer.ts"
import { Nats } from "../packages/bus/src/Nats.ts"
import { SecretBox } from "../packages/crypto/src/SecretBox.ts"
import { DriverExecRequest } from "../packages/host/src/Driver.ts"
import { groupPath } from "../packages/host/src/Driver/Cgroups.ts"
import { serveApi } from "./lib/Api.ts"
import { bwrapArgs, readOnlyRoot } from "./lib/Bwrap.ts"
import {
  agentEnv,
  baseSandboxSpec,
  benchHost,
  bubblewrapDriver,
  cleanHost,
  startAgent,
  UNBOUNDED_HOST
} from "./lib/Hosts.ts"
import { findProcess, machineBusyMs, processCpuMs, treeCpuMs } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { sandboxMaker, watchSandboxEvents } from "./lib/Sandboxes.ts"
import { quantile } from "./lib/Stats.ts"

const N = Number(process.env["BENCH_SANDBOXES"] ?? 200)
const STRACE = process.env["BENCH_STRACE"] === "1"
const BURST = Number(process.env["BENCH_BURST"] ?? 200)
const CONCURRENCY = Number(process.env["BENCH_CONCURRENCY"] ?? 16)
const BARE = 50
const CONCURRENT = 8
const CONCURRENT_ROUNDS = Number(process.env["BENCH_CONCURRENT_ROUNDS"] ?? 10)

const ms = (n: number) => n.toFixed(1).padStart(9)
const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(2).padStart(9)

const readKb = async (file: string, key: string): Promise<number> => {
  try {
    const match = new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(await Fs.readFile(file, "utf8"))
    return match ? Number(match[1]) * 1024 : 0
  } catch {
    return 0
  }
}
/** Whether a process lives in the host's pid namespace (the outer bubblewrap) or the sandbox's. */
const hostPidNs = await Fs.readlink("/proc/self/ns/pid")
const onHostSide = (pid: number) => Fs.readlink(`/proc/${pid}/ns/pid`).then((ns) => ns === hostPidNs, () => false)

/** The agent's process spawner (a child of the agent named svc-spawner-*), if its tree has one. */
const spawnerOf = (agentPid: number): number | undefined => {
  const children = FsSync.readdirSync(`/proc/${agentPid}/task`).flatMap((tid) =>
    FsSync.readFileSync(`/proc/${agentPid}/task/${tid}/children`, "utf8").trim().split(" ").filter(Boolean).map(Number)
  )
  return children.find((pid) => {
    try {
      return FsSync.readFileSync(`/proc/${pid}/comm`, "utf8").startsWith("svc-spawner")
    } catch {
      return false
    }
  })
}

/** `strace -f` on the agent (and its spawner) until `stop`: new processes and execs, by whom. */
const traceStarts = (agentPid: number) => {
  const out = `/tmp/svc-bench-strace-${process.pid}.txt`
  const agentTids = new Set(FsSync.readdirSync(`/proc/${agentPid}/task`).map(Number))
  const spawner = spawnerOf(agentPid)
  const child = spawn("strace", [
    "-f",
    "-qq",
    "-e",
    "trace=execve,clone,clone3,fork,vfork",
    "-e",
    "signal=none",
    "-o",
    out,
    "-p",
    String(agentPid),
    ...(spawner !== undefined ? ["-p", String(spawner)] : [])
  ], { stdio: "ignore" })
  return {
    stop: () =>
      new Promise<{ agentForks: number; starts: number; execs: number }>((resolve) => {
        child.once("exit", () => {
          const lines = FsSync.readFileSync(out, "utf8").split("\n")
          FsSync.rmSync(out, { force: true })
          let agentForks = 0
          let starts = 0
          let execs = 0
          for (const line of lines) {
            const match = /^(\d+)\s+(execve|clone3?|v?fork)\((.*)$/.exec(line)
            if (match === null) continue
            const [, tid, call, rest] = match
            if (call === "execve") {
              if (!/= -\d+ E/.test(rest!)) execs++
              continue
            }
            if (/CLONE_THREAD/.test(rest!) || /= -\d+ E/.test(rest!)) continue
            starts++
            if (agentTids.has(Number(tid))) agentForks++
          }
          resolve({ agentForks, starts, execs })
        })
        child.kill("SIGINT")
      }),
    // strace is attached once it has written its first line or after a moment.
    ready: new Promise<void>((resolve) => setTimeout(resolve, 1000))
  }
}

// ---------------------------------------------------------------------------------------------
// The floor: bubblewrap itself

/**
 * One bare `bwrap` start of the same root file system (every namespace, /proc, /dev, a tmpfs)
 * until its shell runs, then one `nsenter` exec of `echo` in all its namespaces: what any
 * bubblewrap-based platform pays before a user's first command, with nothing of ours.
 */
const bareBubblewrapOnce = (root: string) =>
  new Promise<number>((resolve, reject) => {
    const t0 = performance.now()
    const sandbox = spawn(
      "bwrap",
      bwrapArgs({
        namespaces: ["--unshare-all", "--die-with-parent"],
        mounts: readOnlyRoot(root),
        extra: ["--tmpfs", "/tmp", "--info-fd", "3"],
        argv: ["/bin/sh", "-c", "echo up; exec sleep 1000"]
      }),
      { stdio: ["ignore", "pipe", "inherit", "pipe"] }
    )
    let info = ""
    let up = false
    const fail = (e: Error) => {
      sandbox.kill("SIGKILL")
      reject(e)
    }
    const maybeExec = () => {
      const pid = /"child-pid":\s*(\d+)/.exec(info)?.[1]
      if (!up || pid === undefined) return
      up = false
      const exec = spawn("nsenter", ["-t", pid, "-a", "--", "/bin/echo", "ready"], {
        stdio: ["ignore", "pipe", "inherit"]
      })
      let out = ""
      exec.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()))
      exec.on("error", fail)
      exec.on("exit", (code) => {
        const elapsed = performance.now() - t0
        sandbox.kill("SIGKILL")
        if (code === 0 && out.trim() === "ready") resolve(elapsed)
        else reject(new Error(`bare exec: exit ${code}, ${JSON.stringify(out)}`))
      })
    }
    ;(sandbox.stdio[3] as NodeJS.ReadableStream).on("data", (chunk: Buffer) => {
      info += chunk.toString()
      maybeExec()
    })
    sandbox.stdout!.on("data", (chunk: Buffer) => {
      if (chunk.toString().includes("up")) up = true
      maybeExec()
    })
    sandbox.on("error", fail)
  })

// The floor: the bare driver

const bareDriver = Effect.scoped(Effect.gen(function*() {
  const hostId = `benchbare${process.pid}`
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-bare-")),
    (dir) => cleanHost(hostId, dir)
  )
  const driver = yield* bubblewrapDriver({ dataDir, hostId })
  const echo = new DriverExecRequest({ cmd: ["echo", "ready"] })
  yield* driver.create(baseSandboxSpec("warmup"))
  yield* driver.exec("warmup", echo)
  yield* driver.destroy("warmup")
  const times: Array<number> = []
  for (let i = 0; i < BARE; i++) {
    const t0 = performance.now()
    yield* driver.create(baseSandboxSpec(`bare-${i}`))
    const result = yield* driver.exec(`bare-${i}`, echo)
    times.push(performance.now() - t0)
    if (result.exitCode !== 0) throw new Error("first exec failed")
  }
  for (let i = 0; i < BARE; i++) yield* Effect.ignore(driver.destroy(`bare-${i}`))
  // Bubblewrap alone on the driver's own copy of the `base` root file system.
  const root = NodePath.join(dataDir, "templates", "base")
  yield* Effect.promise(() => bareBubblewrapOnce(root))
  const bwrapTimes: Array<number> = []
  for (let i = 0; i < BARE; i++) bwrapTimes.push(yield* Effect.promise(() => bareBubblewrapOnce(root)))
  return { driver: times, bubblewrap: bwrapTimes }
}))

// ---------------------------------------------------------------------------------------------
// The platform

const platform = Effect.gen(function*() {
  const nats = yield* Nats
  const server = yield* TestNats.TestNatsServer
  const { base, key } = yield* serveApi()

  // Each outbox row remembers its writing transaction, whose commit time Postgres keeps
  // (track_commit_timestamp): a column of this run's throwaway database only.
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE outbox ADD COLUMN bench_xid xid8 DEFAULT pg_current_xact_id()`
  // When each outbox message reached the bus (its Nats-Msg-Id is the row's id), wall-clock ms.
  const epochOf = (t: number) => performance.timeOrigin + t
  const busAt = new Map<string, number>()
  const onBus = nats.connection.subscribe(nats.subject(">"), {
    callback: (error, msg) => {
      const id = error ? undefined : msg.headers?.get("Nats-Msg-Id")
      if (id && !busAt.has(id)) busAt.set(id, epochOf(performance.now()))
    }
  })
  yield* Effect.addFinalizer(() => Effect.sync(() => onBus.unsubscribe()))
  // When each create's POST was sent, by sandbox id (wall-clock ms).
  const postedAt = new Map<string, number>()

  // Running events, by sandbox id, as they reach the EVENTS stream, and how the host made each.
  const events = yield* watchSandboxEvents
  const { runningAt, viaOf } = events

  // The agent, a process of its own.
  const host = yield* benchHost()
  // BENCH_AGENT_CPU_PROF=<dir>: the agent writes a V8 CPU profile there when it stops.
  const profDir = process.env["BENCH_AGENT_CPU_PROF"]
  const agent = yield* startAgent(
    { ...agentEnv(server, host), ...UNBOUNDED_HOST, SVC_AGENT_CONCURRENCY: "16" },
    profDir !== undefined && profDir !== "" ? ["--cpu-prof", "--cpu-prof-dir", profDir] : []
  )

  const { createRunning: create } = yield* sandboxMaker({
    base,
    key,
    events,
    onPosted: (id, sent) => postedAt.set(id, epochOf(sent))
  })
  const createRunning = (name: string) => create({ name })

  // Warm-up: templates, JIT, connections.
  for (let i = 0; i < 5; i++) yield* createRunning(`warmup-${i}`)

  const agentRssBefore = yield* Effect.promise(() => readKb(`/proc/${agent.pid}/status`, "VmRSS"))
  const latencies: Array<number> = []
  const ids: Array<string> = []
  for (let i = 0; i < N; i++) {
    const r = yield* createRunning(`latency-${i}`)
    latencies.push(r.latency)
    ids.push(r.id)
  }

  // Where the time goes, per sandbox: the commit time of each outbox row's writing transaction
  // (Postgres's commit timestamps), when its message reached the bus (this process's
  // subscription), the agent's report time, when the running event was read back here.
  const breakdownOf = (sandboxIds: ReadonlyArray<string>) =>
    Effect.gen(function*() {
      const rows = yield* sql<
        {
          id: string
          api_commit: number
          create_msg: string
          command_commit: number
          command_msg: string
          reported: string
          event_commit: number
          event_msg: string
        }
      >`
        SELECT s.id,
          extract(epoch FROM pg_xact_commit_timestamp(a.bench_xid::text::xid)) * 1000 AS api_commit, a.id AS create_msg,
          extract(epoch FROM pg_xact_commit_timestamp(c.bench_xid::text::xid)) * 1000 AS command_commit, c.id AS command_msg,
          s.last_report_at::text AS reported,
          extract(epoch FROM pg_xact_commit_timestamp(e.bench_xid::text::xid)) * 1000 AS event_commit, e.id AS event_msg
        FROM sandboxes s
        JOIN outbox a ON a.subject LIKE 'actor.sandbox.%.' || s.id
        JOIN outbox c ON c.subject LIKE 'agent.%.create' AND c.payload->>'sandboxId' = s.id
        JOIN outbox e ON e.subject LIKE 'evt.%.sandbox.state_updated' AND e.payload->'data'->>'sandbox_id' = s.id
          AND e.payload->'data'->>'state' = 'running'
        WHERE s.id = ANY(${sandboxIds}::text[])`
      const complete = rows.filter((r) =>
        busAt.has(r.create_msg) && busAt.has(r.command_msg) && busAt.has(r.event_msg) && postedAt.has(r.id)
      )
      const stage = (f: (r: typeof rows[number]) => number) => complete.map((r) => f(r))
      return {
        "POST sent → API transaction committed": stage((r) => Number(r.api_commit) - postedAt.get(r.id)!),
        "→ Create on the bus (relay hop 1)": stage((r) => busAt.get(r.create_msg)! - Number(r.api_commit)),
        "→ runtime committed the agent command": stage((r) => Number(r.command_commit) - busAt.get(r.create_msg)!),
        "→ command on the bus (relay hop 2)": stage((r) => busAt.get(r.command_msg)! - Number(r.command_commit)),
        "→ agent: create, exec check, report": stage((r) => Number(r.reported) - busAt.get(r.command_msg)!),
        // The same stage of the sandboxes served from the warm pool alone (no exec check there).
        "    of those, from the pool": complete.filter((r) => viaOf.get(r.id) === "restore").map((r) =>
          Number(r.reported) - busAt.get(r.command_msg)!
        ),
        "→ runtime committed the running event": stage((r) => Number(r.event_commit) - Number(r.reported)),
        "→ event on the bus (relay hop 3)": stage((r) => busAt.get(r.event_msg)! - Number(r.event_commit)),
        "→ event read back here": stage((r) => epochOf(runningAt.get(r.id)!) - busAt.get(r.event_msg)!)
      }
    })
  const breakdown = yield* breakdownOf(ids)

  // Several clients at once, each creating one sandbox after another.
  const concurrent = yield* Effect.forEach(
    Array.from({ length: CONCURRENT }, (_, client) => client),
    (client) =>
      Effect.forEach(
        Array.from({ length: CONCURRENT_ROUNDS }, (_, i) => i),
        (i) => createRunning(`concurrent-${client}-${i}`)
      ),
    { concurrency: CONCURRENT }
  ).pipe(Effect.map((perClient) => perClient.flat()))

  // Idle memory with N (+5) sandboxes running.
  yield* Effect.sleep("1 second")
  const agentRssAfter = yield* Effect.promise(() => readKb(`/proc/${agent.pid}/status`, "VmRSS"))
  const inside = { rss: 0, pss: 0 }
  const hostSide = { rss: 0, pss: 0 }
  let charge = 0
  for (const id of ids) {
    const group = groupPath({ root: "/sys/fs/cgroup", hostId: host.hostId }, "memory", id)
    const procs = (yield* Effect.promise(() => Fs.readFile(`${group}/cgroup.procs`, "utf8"))).split("\n").filter(
      Boolean
    ).map(Number)
    for (const pid of procs) {
      const rss = yield* Effect.promise(() => readKb(`/proc/${pid}/status`, "VmRSS"))
      const pss = yield* Effect.promise(() => readKb(`/proc/${pid}/smaps_rollup`, "Pss"))
      const side = (yield* Effect.promise(() => onHostSide(pid))) ? hostSide : inside
      side.rss += rss
      side.pss += pss
    }
    charge += Number((yield* Effect.promise(() => Fs.readFile(`${group}/memory.usage_in_bytes`, "utf8"))).trim())
  }

  // Throughput: a burst from several clients.
  const spawnerPid = spawnerOf(agent.pid)
  const trace = STRACE ? traceStarts(agent.pid) : undefined
  if (trace !== undefined) yield* Effect.promise(() => trace.ready)
  const postgresPid = findProcess((cmd) => cmd.includes(`-D ${pg.dir}`))
  const natsPid = findProcess((cmd) => cmd.includes(`-sd ${natsServer.dir}`))
  const burstCpu = () => ({
    machine: machineBusyMs(),
    self: (process.cpuUsage().user + process.cpuUsage().system) / 1000,
    agent: processCpuMs(agent.pid).own,
    spawner: spawnerPid !== undefined ? processCpuMs(spawnerPid).own : 0,
    // What the spawner started and reaped within the burst (`svc-enter`, `mkfs`..., not the
    // sandboxes' bubblewrap, which runs on).
    commands: spawnerPid !== undefined ? processCpuMs(spawnerPid).reaped : 0,
    postgres: postgresPid !== undefined ? treeCpuMs(postgresPid) + processCpuMs(postgresPid).reaped : 0,
    nats: natsPid !== undefined ? processCpuMs(natsPid).own : 0
  })
  const cpuBefore = burstCpu()
  const burstStart = performance.now()
  const burst = yield* Effect.forEach(
    Array.from({ length: BURST }, (_, i) => i),
    (i) => createRunning(`burst-${i}`),
    { concurrency: CONCURRENCY }
  )
  const burstEnd = Math.max(...burst.map((b) => runningAt.get(b.id)!))
  const burstLatencies = burst.map((b) => b.latency)
  const cpuAfter = burstCpu()
  const perCreate = (key: keyof typeof cpuAfter) => (cpuAfter[key] - cpuBefore[key]) / BURST
  const cpuPerCreate = {
    machine: perCreate("machine"),
    self: perCreate("self"),
    agent: perCreate("agent"),
    spawner: spawnerPid !== undefined ? perCreate("spawner") : undefined,
    commands: spawnerPid !== undefined ? perCreate("commands") : undefined,
    postgres: perCreate("postgres"),
    nats: perCreate("nats")
  }
  const burstBreakdown = yield* breakdownOf(burst.map((b) => b.id))
  const traced = trace !== undefined ? yield* Effect.promise(() => trace.stop()) : undefined

  return {
    breakdown,
    burstBreakdown,
    concurrent,
    latencies,
    agentPerSandbox: (agentRssAfter - agentRssBefore) / N,
    inside: { rss: inside.rss / N, pss: inside.pss / N },
    hostSide: { rss: hostSide.rss / N, pss: hostSide.pss / N },
    chargePerSandbox: charge / N,
    creates: BURST / ((burstEnd - burstStart) / 1000),
    burstLatencies,
    cpuPerCreate,
    traced,
    // Latencies by how the host made the sandbox (warm pool entry or cold start).
    byVia: (runs: ReadonlyArray<{ id: string; latency: number }>) => {
      const groups: Record<string, Array<number>> = {}
      for (const r of runs) (groups[viaOf.get(r.id) ?? "unknown"] ??= []).push(r.latency)
      return groups
    },
    latencyRuns: ids.map((id, i) => ({ id, latency: latencies[i]! })),
    concurrentRuns: concurrent,
    burstRuns: burst
  }
})

// One bench client makes hundreds of calls a second; the per-key rate limit is not under test.
process.env.SVC_RATE_LIMIT_PER_SECOND = "100000"
process.env.SVC_RATE_LIMIT_BURST = "100000"
// One org holds hundreds of sandboxes at once (BENCH_SANDBOXES running, then a BENCH_BURST).
process.env.SVC_ORG_MAX_SANDBOXES = "100000"
process.env.SVC_ORG_MAX_RUNNING_SANDBOXES = "100000"
const [natsServer, pg] = await Promise.all([startNats(), startPostgres({ settings: { track_commit_timestamp: "on" } })])
process.env.SVC_TEST_NATS_URL = natsServer.url
process.env.SVC_TEST_DATABASE_URL = pg.url
useTestEncryptionKeys()
try {
  const floors = await Effect.runPromise(bareDriver)
  const result = await Effect.runPromise(
    Effect.scoped(platform).pipe(
      Effect.provide(
        Layer.mergeAll(
          Runtime.make({ heartbeat: false }),
          AuthLayer.layerWith({})
        ).pipe(Layer.provideMerge(Layer.mergeAll(TestNats.layer, TestDatabase.layer, SecretBox.layer)))
      )
    )
  )
  const p50 = (values: ReadonlyArray<number>) => quantile(values, 0.5)
  const row = (name: string, values: ReadonlyArray<number>, target = "") =>
    console.log(
      `${name.padEnd(46)}${ms(p50(values))}${ms(quantile(values, 0.99))}${ms(Math.max(...values))}  ${target}`
    )
  const sequentialVia = result.byVia(result.latencyRuns)
  const concurrentVia = result.byVia(result.concurrentRuns)
  const burstVia = result.byVia(result.burstRuns)
  const concurrentLatencies = result.concurrent.map((r) => r.latency)

  console.log(`\nsandboxes, create → running (${Os.cpus().length} cores, kernel ${Os.release()})`)
  console.log(`${"".padEnd(46)}${"p50 ms".padStart(9)}${"p99 ms".padStart(9)}${"max ms".padStart(9)}`)
  row(`floor: bare bwrap start → one exec (${BARE})`, floors.bubblewrap)
  row(`our driver alone: start → first exec (${BARE})`, floors.driver)
  row(`platform: POST → running event (${N} in a row)`, result.latencies, "target p50 < 50, p99 < 200")
  for (const [via, values] of Object.entries(sequentialVia)) row(`  via ${via}: ${values.length}`, values)
  console.log("  where the time goes (one after the other):")
  for (const [stage, values] of Object.entries(result.breakdown)) if (values.length > 0) row(`    ${stage}`, values)
  row(
    `${CONCURRENT} clients at once, ${CONCURRENT_ROUNDS} creates each`,
    concurrentLatencies,
    "target p50 < 150"
  )
  for (const [via, values] of Object.entries(concurrentVia)) row(`  via ${via}: ${values.length}`, values)
  row(`burst: ${BURST} creates, ${CONCURRENCY} clients at once`, result.burstLatencies)
  for (const [via, values] of Object.entries(burstVia)) row(`  via ${via}: ${values.length}`, values)
  console.log("  where the time goes (burst):")
  for (const [stage, values] of Object.entries(result.burstBreakdown)) {
    if (values.length > 0) row(`    ${stage}`, values)
  }
  console.log(
    `${"creates per second, sustained (burst)".padEnd(46)}${result.creates.toFixed(1).padStart(9)}  target ≥ 50`
  )
  const cpu = result.cpuPerCreate
  console.log(`CPU per create in the burst (ms; 2 cores at 50/s allow ${(Os.cpus().length * 1000 / 50).toFixed(0)})`)
  console.log(`${"  the whole machine (every process, kernel)".padEnd(46)}${cpu.machine.toFixed(2).padStart(9)}`)
  console.log(`${"  API + runtime (this process)".padEnd(46)}${cpu.self.toFixed(2).padStart(9)}`)
  console.log(`${"  agent".padEnd(46)}${cpu.agent.toFixed(2).padStart(9)}`)
  if (cpu.spawner !== undefined) {
    console.log(`${"  its spawner".padEnd(46)}${cpu.spawner.toFixed(2).padStart(9)}`)
    console.log(`${"  the commands it started and reaped".padEnd(46)}${(cpu.commands ?? 0).toFixed(2).padStart(9)}`)
  }
  console.log(`${"  Postgres (every backend)".padEnd(46)}${cpu.postgres.toFixed(2).padStart(9)}`)
  console.log(`${"  NATS".padEnd(46)}${cpu.nats.toFixed(2).padStart(9)}`)
  const named = cpu.self + cpu.agent + (cpu.spawner ?? 0) + (cpu.commands ?? 0) + cpu.postgres + cpu.nats
  console.log(
    `${"  the rest (sandboxes' own processes, kernel)".padEnd(46)}${(cpu.machine - named).toFixed(2).padStart(9)}`
  )
  if (result.traced !== undefined) {
    const per = (n: number) => (n / BURST).toFixed(2).padStart(9)
    console.log(`processes started per create in the burst (strace -f)`)
    console.log(`${"  forks of the agent process".padEnd(46)}${per(result.traced.agentForks)}`)
    console.log(`${"  process starts (fork, vfork, clone)".padEnd(46)}${per(result.traced.starts)}`)
    console.log(`${"  execs".padEnd(46)}${per(result.traced.execs)}`)
  }
  console.log(`\nidle memory per sandbox (${N} running)${"MiB".padStart(21)}`)
  console.log(`${"  its processes inside (RSS / PSS)".padEnd(46)}${mib(result.inside.rss)}${mib(result.inside.pss)}`)
  console.log(
    `${"  its host-side bubblewrap (RSS / PSS)".padEnd(46)}${mib(result.hostSide.rss)}${mib(result.hostSide.pss)}`
  )
  console.log(`${"  beyond them: agent process growth".padEnd(46)}${mib(result.agentPerSandbox)}  target < 5`)
  console.log(`${"  cgroup charge (its processes + kernel)".padEnd(46)}${mib(result.chargePerSandbox)}`)

  // The run's figures against their floors and targets (bench/lib/Report.ts).
  console.log("")
  const floor = p50(floors.bubblewrap)
  const bench = "sandboxes"
  const cold = [...(sequentialVia["cold-boot"] ?? [])]
  const restored = [...(sequentialVia["restore"] ?? [])]
  if (cold.length > 0) {
    const v = p50(cold)
    record({
      bench,
      figure: "cold boot, POST → running p50",
      value: v,
      unit: "ms",
      baseline: floor,
      baselineName: "bare bwrap + exec",
      ratio: v / floor,
      target: "≤ 3× the floor",
      met: v <= 3 * floor
    })
  }
  if (restored.length > 0) {
    const v = p50(restored)
    record({
      bench,
      figure: "from the pool, POST → running p50",
      value: v,
      unit: "ms",
      baseline: floor,
      baselineName: "bare bwrap + exec",
      ratio: v / floor,
      target: "< 15 ms",
      met: v < 15
    })
  }
  const c = p50(concurrentLatencies)
  record({
    bench,
    figure: `${CONCURRENT} concurrent creates p50`,
    value: c,
    unit: "ms",
    baseline: floor,
    baselineName: "bare bwrap + exec",
    ratio: c / floor,
    target: "< 150 ms",
    met: c < 150
  })
  record({
    bench,
    figure: "creates/s sustained (burst)",
    value: result.creates,
    unit: "/s",
    target: "≥ 50",
    met: result.creates >= 50
  })
  for (const hop of [1, 2, 3]) {
    const entry = Object.entries(result.breakdown).find(([stage]) => stage.includes(`relay hop ${hop}`))
    if (entry !== undefined) {
      const v = p50(entry[1])
      record({
        bench,
        figure: `relay hop ${hop}, commit → on the bus p50`,
        value: v,
        unit: "ms",
        target: "≤ 1 ms",
        met: v <= 1
      })
    }
  }
  record({
    bench,
    figure: "machine CPU per create (burst)",
    value: cpu.machine,
    unit: "ms",
    target: `≤ ${(Os.cpus().length * 1000 / 50).toFixed(0)} ms for 50/s`,
    met: cpu.machine <= Os.cpus().length * 1000 / 50
  })
} finally {
  await Promise.all([natsServer.stop(), pg.close()])
}
