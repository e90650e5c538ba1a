/**
 * The bare sandbox driver, without NATS, Postgres or actors: the floor the platform's
 * create → running → exec path will be compared against.
 *   node bench/driver.ts        (N=50 by default; BENCH_SANDBOXES=20 for fewer;
 *                               BENCH_DISK_STOCK=0 formats every sandbox's disk image at its create)
 *
 * Measures, for N sequential creates of the `base` template (all kept running):
 *   create → first successful exec (the moment a user could run a command), split into the
 *   create call and the first exec; warm exec latency; idle memory per sandbox (RSS and PSS of
 *   its processes inside and on the host side, the cgroup's charge, MemAvailable drop); stop,
 *   start (restore) and destroy times.
 */
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Effect } from "effect"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import { DriverExecRequest } from "../packages/host/src/Driver.ts"
import { CONTROLLERS, groupPath } from "../packages/host/src/Driver/Cgroups.ts"
import { baseSandboxSpec, bubblewrapDriver } from "./lib/Hosts.ts"

const N = Number(process.env["BENCH_SANDBOXES"] ?? 50)
const WARM_EXECS = 50

const quantile = (values: ReadonlyArray<number>, q: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? 0
}
const ms = (n: number) => n.toFixed(1).padStart(8)
const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(2).padStart(8)

const readKb = async (file: string, key: string): Promise<number> => {
  try {
    const text = await Fs.readFile(file, "utf8")
    const match = new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(text)
    return match ? Number(match[1]) * 1024 : 0
  } catch {
    return 0
  }
}

const parentOf = async (pid: number) => {
  const stat = await Fs.readFile(`/proc/${pid}/stat`, "utf8")
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
}

const memAvailable = () => readKb("/proc/meminfo", "MemAvailable")

const program = Effect.gen(function*() {
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-driver-")),
    (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
  )
  const hostId = `bench-${process.pid}`
  yield* Effect.addFinalizer(() =>
    Effect.promise(async () => {
      for (const c of CONTROLLERS) await Fs.rmdir(`/sys/fs/cgroup/${c}/svc-sandboxes/${hostId}`).catch(() => undefined)
    })
  )
  // The env in sandbox.json is sealed: the run's test key, as the platform's roles get theirs.
  const driver = yield* bubblewrapDriver({
    dataDir,
    hostId,
    ...(process.env["BENCH_DISK_STOCK"] !== undefined ? { diskStock: Number(process.env["BENCH_DISK_STOCK"]) } : {})
  })
  const ids = Array.from({ length: N }, (_, i) => `bench-${i}`)
  yield* Effect.addFinalizer(() =>
    Effect.forEach(ids, (id) => driver.destroy(id).pipe(Effect.ignore), { discard: true })
  )

  const echo = new DriverExecRequest({ cmd: ["echo", "ready"] })

  // Warm-up: template build, JIT, page cache.
  yield* driver.create(baseSandboxSpec("bench-warmup"))
  yield* driver.exec("bench-warmup", echo)
  yield* driver.destroy("bench-warmup")

  const availableBefore = yield* Effect.promise(memAvailable)
  const total: Array<number> = []
  const creates: Array<number> = []
  const firstExecs: Array<number> = []
  const pids: Array<number> = []
  for (const id of ids) {
    const t0 = performance.now()
    const info = yield* driver.create(baseSandboxSpec(id))
    const t1 = performance.now()
    const result = yield* driver.exec(id, echo)
    const t2 = performance.now()
    if (result.exitCode !== 0) throw new Error(`first exec failed in ${id}`)
    creates.push(t1 - t0)
    firstExecs.push(t2 - t1)
    total.push(t2 - t0)
    pids.push(info.pid!)
  }

  const warm: Array<number> = []
  const trueCmd = new DriverExecRequest({ cmd: ["true"] })
  for (let i = 0; i < WARM_EXECS; i++) {
    const t0 = performance.now()
    yield* driver.exec(ids[i % ids.length]!, trueCmd)
    warm.push(performance.now() - t0)
  }

  // Idle memory: let the execs' processes go, then read every sandbox.
  yield* Effect.sleep(500)
  const availableAfter = yield* Effect.promise(memAvailable)
  const inside = { rss: 0, pss: 0 }
  const hostSide = { rss: 0, pss: 0 }
  let cgroupCharge = 0
  for (const [i, id] of ids.entries()) {
    const init = pids[i]!
    const procs = (yield* Effect.promise(() =>
      Fs.readFile(`${groupPath({ root: "/sys/fs/cgroup", hostId }, "memory", id)}/cgroup.procs`, "utf8")
    )).split("\n").filter(Boolean).map(Number)
    const outer = yield* Effect.promise(() =>
      parentOf(init)
    )
    for (const pid of procs) {
      const rss = yield* Effect.promise(() => readKb(`/proc/${pid}/status`, "VmRSS"))
      const pss = yield* Effect.promise(() => readKb(`/proc/${pid}/smaps_rollup`, "Pss"))
      // The outer bubblewrap (parent of the namespace's pid 1) waits on the host side.
      const side = pid === outer ? hostSide : inside
      side.rss += rss
      side.pss += pss
    }
    cgroupCharge += Number((yield* Effect.promise(() =>
      Fs.readFile(`${groupPath({ root: "/sys/fs/cgroup", hostId }, "memory", id)}/memory.usage_in_bytes`, "utf8")
    )).trim())
  }

  const stops: Array<number> = []
  const starts: Array<number> = []
  const destroys: Array<number> = []
  for (const id of ids.slice(0, 10)) {
    const t0 = performance.now()
    yield* driver.stop(id)
    const t1 = performance.now()
    yield* driver.start(id)
    yield* driver.exec(id, echo)
    starts.push(performance.now() - t1)
    stops.push(t1 - t0)
  }
  for (const id of ids) {
    const t0 = performance.now()
    yield* driver.destroy(id)
    destroys.push(performance.now() - t0)
  }

  const row = (name: string, values: ReadonlyArray<number>) =>
    console.log(`${name.padEnd(40)}${ms(quantile(values, 0.5))}${ms(quantile(values, 0.99))}${ms(Math.max(...values))}`)
  console.log(
    `\nbare bubblewrap driver, ${N} sequential creates of "base" (${Os.cpus().length} cores, kernel ${Os.release()})`
  )
  console.log(`${"".padEnd(40)}${"p50 ms".padStart(8)}${"p99 ms".padStart(8)}${"max ms".padStart(8)}`)
  row("create → first successful exec", total)
  row("  create (start + network + limits)", creates)
  row("  first exec (echo)", firstExecs)
  row(`warm exec (true), ${WARM_EXECS}x`, warm)
  row("stop", stops)
  row("start again (restore) → exec", starts)
  row("destroy", destroys)
  console.log(`\nidle memory per sandbox (${N} running)${"MiB".padStart(12)}`)
  console.log(`${"  processes inside (RSS)".padEnd(40)}${mib(inside.rss / N)}`)
  console.log(`${"  processes inside (PSS)".padEnd(40)}${mib(inside.pss / N)}`)
  console.log(`${"  host-side bubblewrap (RSS)".padEnd(40)}${mib(hostSide.rss / N)}`)
  console.log(`${"  host-side bubblewrap (PSS)".padEnd(40)}${mib(hostSide.pss / N)}`)
  console.log(`${"  cgroup charge (incl. kernel, cache)".padEnd(40)}${mib(cgroupCharge / N)}`)
  console.log(`${"  MemAvailable drop (noisy, shared box)".padEnd(40)}${mib((availableBefore - availableAfter) / N)}`)
})

useTestEncryptionKeys()
await Effect.runPromise(Effect.scoped(program))
