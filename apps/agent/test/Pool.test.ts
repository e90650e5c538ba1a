/** The warm pool: creates of `base` sandboxes served from pre-started entries. */
import { assert, layer } from "@effect/vitest"
import { makeSandboxId } from "@svc/domain/Ids"
import { DriverExecRequest } from "@svc/host/Driver"
import { processesOfHost } from "@svc/testing/HostProcesses"
import { Effect, Fiber } from "effect"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import { poolMakers } from "../src/LocalSandboxes.ts"
import {
  createCommand,
  eventually,
  http,
  lifecycleCommand,
  makeHost,
  poolEntries,
  publishCommand,
  Reports,
  startAgent,
  testLayer
} from "../testing/Agent.ts"

layer(testLayer, { excludeTestServices: true, timeout: 120_000 })("host agent warm pool", (it) => {
  it.effect("a create takes a pool entry (via restore) with its env, limits and hostname; the pool refills; a stop destroys it", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host, { poolSize: 2 })
      const reports = yield* Reports
      // Ready in memory, not only running on disk: an entry is handed out once its exec answered.
      const before = (yield* eventually(agent.lifecycle.pool, (s) => s.ready.length === 2)).ready

      const sandboxId = makeSandboxId()
      yield* publishCommand(
        host.hostId,
        createCommand(sandboxId, { env: { GREETING: "from the pool" }, cpu: 2, ramMb: 96, exposedPorts: [8080] })
      )
      const report = yield* reports.waitFor(sandboxId, () => true)
      assert.strictEqual(report.status, "running", JSON.stringify(report))
      assert.strictEqual(report.via, "restore")
      assert.isTrue(report.agentReady)

      const rows = yield* agent.driver.list
      const row = rows.find((r) => r.sandboxId === sandboxId)!
      assert.strictEqual(row.internalIp, report.internalIp)
      // One of the entries became the sandbox: it is gone from the pool under its old name.
      assert.strictEqual(before.filter((id) => rows.some((r) => r.sandboxId === id)).length, 1)

      const response = yield* http(agent, `/sandboxes/${sandboxId}/exec`, {
        method: "POST",
        body: JSON.stringify({ cmd: ["sh", "-c", "echo $GREETING; hostname"] })
      })
      assert.strictEqual(response.status, 200)
      assert.strictEqual(response.json.stdout, `from the pool\n${sandboxId}\n`)
      const group = (controller: string, file: string) =>
        FsSync.readFileSync(
          NodePath.join("/sys/fs/cgroup", controller, "svc-sandboxes", host.hostId, sandboxId, file),
          "utf8"
        ).trim()
      assert.strictEqual(group("memory", "memory.limit_in_bytes"), String(96 * 1024 * 1024))
      assert.strictEqual(group("cpu", "cpu.cfs_quota_us"), "200000")

      // Refilled to its size with a new entry.
      const after = poolEntries(yield* eventually(agent.driver.list, (rows) => poolEntries(rows).length === 2))
      assert.strictEqual(after.filter((id) => !before.includes(id)).length, 1)

      // Another template never takes an entry (here: unknown, so it fails) and leaves the pool alone.
      const other = makeSandboxId()
      yield* publishCommand(host.hostId, createCommand(other, { template: "no-such-template" }))
      assert.strictEqual((yield* reports.waitFor(other, () => true)).status, "failed")
      assert.sameMembers(poolEntries(yield* agent.driver.list), after)
      // Another disk size neither: the entries' disk images are not resized; a cold boot gets its own.
      const bigger = makeSandboxId()
      yield* publishCommand(host.hostId, createCommand(bigger, { diskGb: 2 }))
      const biggerReport = yield* reports.waitFor(bigger, () => true)
      assert.strictEqual(biggerReport.status, "running", JSON.stringify(biggerReport))
      assert.strictEqual(biggerReport.via, "cold-boot")
      assert.sameMembers(poolEntries(yield* agent.driver.list), after)
      const disk = yield* agent.driver.exec(bigger, new DriverExecRequest({ cmd: ["sh", "-c", "df -k / | tail -1"] }))
      const diskKb = Number(Buffer.from(disk.stdout).toString().trim().split(/\s+/)[1])
      assert.isAbove(diskKb, 1.9 * 1024 * 1024)
      assert.isAtMost(diskKb, 2 * 1024 * 1024)
      yield* publishCommand(host.hostId, lifecycleCommand("destroy", bigger))
      yield* reports.waitFor(bigger, (r) => r.status === "destroyed")

      yield* publishCommand(host.hostId, lifecycleCommand("destroy", sandboxId))
      yield* reports.waitFor(sandboxId, (r) => r.status === "destroyed")
      yield* agent.stop
      assert.deepStrictEqual(yield* agent.driver.list, [])
      assert.deepStrictEqual(processesOfHost(host.hostId), [])
    }))

  it.effect("after a run of adoptions the pool refills side by side, never above its size, to distinct entries that each answer an exec; a stop mid-refill leaves none", () =>
    Effect.gen(function*() {
      const size = 3
      const host = yield* makeHost
      const agent = yield* startAgent(host, { poolSize: size, concurrency: 8 })
      const reports = yield* Reports
      // Ready in memory, not only running on disk: an entry is handed out once its exec answered.
      const first = (yield* eventually(agent.lifecycle.pool, (s) => s.ready.length === size)).ready

      // Watches the pool while creates drain it: ready entries plus entries being made.
      const samples: Array<{ ready: number; making: number }> = []
      const watcher = yield* Effect.forkChild(Effect.forever(
        Effect.gen(function*() {
          const status = yield* agent.lifecycle.pool
          samples.push({ ready: status.ready.length, making: status.making })
          yield* Effect.sleep("2 millis")
        })
      ))

      // Twice the pool's size at once: the first `size` take entries, the rest race the refills.
      const ids = Array.from({ length: 2 * size }, () => makeSandboxId())
      for (const id of ids) yield* publishCommand(host.hostId, createCommand(id))
      const made = yield* Effect.forEach(ids, (id) => reports.waitFor(id, () => true))
      assert.isTrue(made.every((r) => r.status === "running" && r.agentReady === true), JSON.stringify(made))
      assert.isAtLeast(made.filter((r) => r.via === "restore").length, size)

      const refilled = yield* eventually(agent.lifecycle.pool, (s) => s.ready.length === size && s.making === 0)
      yield* Fiber.interrupt(watcher)
      for (const sample of samples) {
        assert.isAtMost(sample.ready + sample.making, size, JSON.stringify(sample))
        assert.isAtMost(sample.making, poolMakers(size), JSON.stringify(sample))
      }
      // Side by side: with `size` entries taken at once, every maker was busy at the same time
      // (making one takes tens of milliseconds of process starts; the watcher looks every few).
      assert.strictEqual(Math.max(...samples.map((s) => s.making)), poolMakers(size))

      // The new entries: as many as the pool's size, distinct, none of the adopted ones, each
      // running with an init of its own that answers an exec.
      const rows = yield* agent.driver.list
      const entries = poolEntries(rows)
      assert.sameMembers(entries, [...refilled.ready])
      assert.strictEqual(new Set(entries).size, size)
      for (const id of entries) assert.notInclude(first, id)
      const pids = rows.map((r) => r.pid)
      assert.strictEqual(new Set(pids).size, rows.length)
      for (const id of entries) {
        const result = yield* agent.driver.exec(id, new DriverExecRequest({ cmd: ["hostname"] }))
        assert.strictEqual(result.exitCode, 0)
        assert.strictEqual(Buffer.from(result.stdout).toString(), `${id}\n`)
      }
      assert.sameMembers(rows.filter((r) => !r.sandboxId.startsWith("pool-")).map((r) => r.sandboxId), ids)

      // Drain it again and stop at once, while entries are being made: the stop waits for them
      // and destroys every entry; only the platform's sandboxes stay, and only their processes.
      const more = Array.from({ length: size }, () => makeSandboxId())
      for (const id of more) yield* publishCommand(host.hostId, createCommand(id))
      for (const id of more) yield* reports.waitFor(id, () => true)
      yield* agent.stop
      const left = yield* agent.driver.list
      assert.sameMembers(left.map((r) => r.sandboxId), [...ids, ...more])
      for (const id of [...ids, ...more]) yield* agent.driver.destroy(id)
      assert.deepStrictEqual(yield* agent.driver.list, [])
      assert.deepStrictEqual(processesOfHost(host.hostId), [])
      assert.deepStrictEqual(FsSync.readdirSync(NodePath.join(host.dataDir, "sandboxes")), [])
    }))

  it.effect("pool size 0: no entry is made and creates cold-boot", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host, { poolSize: 0 })
      const reports = yield* Reports
      const sandboxId = makeSandboxId()
      yield* publishCommand(host.hostId, createCommand(sandboxId))
      const report = yield* reports.waitFor(sandboxId, () => true)
      assert.strictEqual(report.via, "cold-boot")
      assert.deepStrictEqual((yield* agent.driver.list).map((r) => r.sandboxId), [sandboxId])
      yield* publishCommand(host.hostId, lifecycleCommand("destroy", sandboxId))
      yield* reports.waitFor(sandboxId, (r) => r.status === "destroyed")
    }))
})
