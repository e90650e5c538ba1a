/**
 * What noticing dead sandboxes costs the agent: `ended` (what its exit watcher runs every
 * 500 ms per running sandbox, 4 at a time) over N running sandboxes, timed per sweep, with
 * the process's CPU time per sweep; then one sandbox's init killed, and the sweeps until it is
 * found.
 *   node bench/exits.ts          (N=200 by default; BENCH_SANDBOXES=50 for fewer)
 */
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Effect } from "effect"
import * as Fs from "node:fs/promises"
import * as Cgroups from "../packages/host/src/Driver/Cgroups.ts"
import { baseSandboxSpec, bubblewrapDriver } from "./lib/Hosts.ts"

const N = Number(process.env["BENCH_SANDBOXES"] ?? 200)
const SWEEPS = 40

const quantile = (values: ReadonlyArray<number>, q: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? 0
}

const program = Effect.gen(function*() {
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-exits-")),
    (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
  )
  const hostId = `bench-${process.pid}`
  yield* Effect.addFinalizer(() => Effect.promise(() => Cgroups.make({ root: "/sys/fs/cgroup", hostId }).removeHost()))
  const driver = yield* bubblewrapDriver({ dataDir, hostId })
  const ids = Array.from({ length: N }, (_, i) => `exits-${i}`)
  yield* Effect.addFinalizer(() =>
    Effect.forEach(ids, (id) => driver.destroy(id).pipe(Effect.ignore), { concurrency: 4, discard: true })
  )
  const pids = new Map<string, number>()
  yield* Effect.forEach(ids, (id) =>
    Effect.map(
      driver.create(baseSandboxSpec(id, 64)),
      (info) => pids.set(id, info.pid!)
    ), { concurrency: 4, discard: true })

  const sweep = Effect.gen(function*() {
    const cpu = process.cpuUsage()
    const start = performance.now()
    const ended = yield* Effect.forEach(ids, (id) => driver.ended(id), { concurrency: 4 })
    const wallMs = performance.now() - start
    const used = process.cpuUsage(cpu)
    return { wallMs, cpuMs: (used.user + used.system) / 1000, ended: ended.filter((e) => e !== undefined).length }
  })
  yield* sweep
  const runs: Array<{ wallMs: number; cpuMs: number }> = []
  for (let i = 0; i < SWEEPS; i++) runs.push(yield* sweep)
  const wall = runs.map((r) => r.wallMs)
  const cpu = runs.map((r) => r.cpuMs)
  console.log(`${N} running sandboxes, ${SWEEPS} sweeps of ended():`)
  console.log(`  wall per sweep  p50 ${quantile(wall, 0.5).toFixed(1)} ms, p99 ${quantile(wall, 0.99).toFixed(1)} ms`)
  console.log(
    `  cpu per sweep   p50 ${quantile(cpu, 0.5).toFixed(1)} ms (at one sweep per 500 ms: ${
      (quantile(cpu, 0.5) / 5).toFixed(1)
    }% of a core)`
  )

  const victim = ids[Math.floor(N / 2)]!
  process.kill(pids.get(victim)!, "SIGKILL")
  const killedAt = performance.now()
  for (;;) {
    const found = yield* sweep
    if (found.ended > 0) {
      console.log(
        `  a killed init found by the next sweep after ${
          (performance.now() - killedAt).toFixed(1)
        } ms (it includes the teardown)`
      )
      break
    }
  }
})

useTestEncryptionKeys()
Effect.runPromise(Effect.scoped(program)).catch((e) => {
  console.error(e)
  process.exit(1)
})
