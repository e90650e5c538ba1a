/**
 * What the host's steps of a create and a delete cost in CPU, by cgroup (issue 27: CPU per
 * create), for the steps taken out of the path or done another way, each against what it
 * replaced, in the same run, batches alternating (the order reversed every round):
 *   - the agent's former readiness probe: the driver's exec of `true` in a running sandbox, once
 *     per create and start until 2026-11-28 (now `agent_ready` is the init's ready byte);
 *   - a veth host end removed by `ip link del` (a program started through the spawner) against
 *     the spawner's own rtnetlink (`Spawner.unlink`), once per delete and stop: each pair made by
 *     `ip link add` first, in both batches alike.
 * CPU is read from a cpuacct group this process moves itself into before it starts anything
 * (its own work, the spawner's, every program it started, reaped by whoever) plus the sandboxes'
 * groups: at a load of other tenants' a per-process figure misses what others reaped, and wall
 * times mostly measure the wait for a core. cgroup v1 (`cpuacct.usage`) or v2 (`cpu.stat`).
 *
 *   node bench/create-steps.ts     (BENCH_STEPS_N=40 per batch, BENCH_RUNS=5 rounds)
 */
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Effect } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { DriverExecRequest } from "../packages/host/src/Driver.ts"
import { CONTROLLERS } from "../packages/host/src/Driver/Cgroups.ts"
import { runChecked } from "../packages/host/src/Driver/Process.ts"
import * as Spawner from "../packages/host/src/Driver/Spawner.ts"
import { baseSandboxSpec, bubblewrapDriver } from "./lib/Hosts.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"

const N = Number(process.env["BENCH_STEPS_N"] ?? 40)
const RUNS = Number(process.env["BENCH_RUNS"] ?? 5)
const IP = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].find((p) => FsSync.existsSync(p))
if (IP === undefined) throw new Error("bench/create-steps.ts needs iproute2's ip")

useTestEncryptionKeys()
const CGROUP_ROOT = "/sys/fs/cgroup"
const v2 = FsSync.existsSync(NodePath.join(CGROUP_ROOT, "cgroup.controllers"))
const accounting = v2 ? CGROUP_ROOT : NodePath.join(CGROUP_ROOT, "cpuacct")
const ownGroup = NodePath.join(accounting, `svc-bench-steps-${process.pid}`)
const hostId = `bench-steps-${process.pid}`
const sandboxesGroup = NodePath.join(accounting, "svc-sandboxes", hostId)
FsSync.mkdirSync(ownGroup)
FsSync.writeFileSync(NodePath.join(ownGroup, "cgroup.procs"), String(process.pid))

/** ms of CPU a group and its descendants used so far. */
const usage = (dir: string): number => {
  try {
    if (v2) {
      const stat = FsSync.readFileSync(NodePath.join(dir, "cpu.stat"), "utf8")
      return Number(/^usage_usec (\d+)$/m.exec(stat)?.[1] ?? 0) / 1000
    }
    return Number(FsSync.readFileSync(NodePath.join(dir, "cpuacct.usage"), "utf8")) / 1e6
  } catch {
    return 0
  }
}
const cpu = () => usage(ownGroup) + usage(sandboxesGroup)

const program = Effect.gen(function*() {
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-steps-")),
    (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
  )
  yield* Effect.addFinalizer(() =>
    Effect.promise(async () => {
      for (const c of CONTROLLERS) await Fs.rmdir(`${CGROUP_ROOT}/${c}/svc-sandboxes/${hostId}`).catch(() => undefined)
    })
  )
  const driver = yield* bubblewrapDriver({ dataDir, hostId })
  const id = "steps-0"
  yield* driver.create(baseSandboxSpec(id))
  yield* Effect.addFinalizer(() => driver.destroy(id).pipe(Effect.ignore))

  const probe = driver.exec(id, new DriverExecRequest({ cmd: ["true"], timeoutMs: 5_000 }))
  // Host interface names of 15 bytes at most, this run's own.
  const pair = (i: number) => [`svb${process.pid % 100000}a${i}`, `svb${process.pid % 100000}b${i}`] as const
  const made = (i: number) =>
    runChecked("bench", IP, ["link", "add", pair(i)[0], "type", "veth", "peer", "name", pair(i)[1]])
  const steps: Record<string, (i: number) => Effect.Effect<unknown, unknown>> = {
    "exec of `true` (the former readiness probe)": () => probe,
    "veth pair made, removed by `ip link del`": (i) =>
      Effect.andThen(made(i), runChecked("bench", IP, ["link", "del", pair(i)[0]])),
    "veth pair made, removed by the spawner's rtnetlink": (i) =>
      Effect.andThen(made(i), Effect.promise(() => Spawner.unlink(pair(i)[0])))
  }
  for (let i = 0; i < 3; i++) yield* probe
  const perStep: Record<string, Array<number>> = {}
  const loads: Array<number> = []
  for (let round = 0; round < RUNS; round++) {
    loads.push(Os.loadavg()[0]!)
    const order = round % 2 === 0 ? Object.keys(steps) : Object.keys(steps).reverse()
    for (const name of order) {
      const before = cpu()
      for (let i = 0; i < N; i++) yield* steps[name]!(i)
      ;(perStep[name] ??= []).push((cpu() - before) / N)
    }
  }
  return { perStep, loads }
}).pipe(Effect.scoped)

const { loads, perStep } = await Effect.runPromise(program)
FsSync.writeFileSync(NodePath.join(NodePath.dirname(ownGroup), "cgroup.procs"), String(process.pid))
FsSync.rmdirSync(ownGroup)

console.log(
  `host steps by cgroup, ms of CPU each: median of ${RUNS} rounds of ${N} (load average ${
    Math.min(...loads).toFixed(1)
  }–${Math.max(...loads).toFixed(1)})`
)
for (const [name, values] of Object.entries(perStep)) {
  console.log(
    `  ${name.padEnd(52)}${median(values).toFixed(2).padStart(7)}   (${values.map((v) => v.toFixed(2)).join(", ")})`
  )
}
const ipDel = median(perStep["veth pair made, removed by `ip link del`"]!)
const rtnl = median(perStep["veth pair made, removed by the spawner's rtnetlink"]!)
record({
  bench: "create-steps",
  figure: "the readiness probe's exec of `true` (no longer per create), ms of CPU",
  value: median(perStep["exec of `true` (the former readiness probe)"]!),
  unit: "ms",
  runs: RUNS
})
record({
  bench: "create-steps",
  figure: "a veth pair made and removed by the spawner's rtnetlink, ms of CPU",
  value: rtnl,
  unit: "ms",
  baseline: ipDel,
  baselineName: "removed by `ip link del`",
  ratio: rtnl / ipDel,
  runs: RUNS
})
process.exit(0)
