/** The warm pool: creates of `base` sandboxes served from pre-started entries. */
import { assert, layer } from "@effect/vitest"
import { makeSandboxId } from "@svc/domain/Ids"
import { Effect } from "effect"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import {
  createCommand,
  eventually,
  http,
  lifecycleCommand,
  makeHost,
  processesOfHost,
  publishCommand,
  Reports,
  startAgent,
  testLayer
} from "./fixtures/support.ts"

const poolEntries = (rows: ReadonlyArray<{ readonly sandboxId: string; readonly status: string }>) =>
  rows.filter((r) => r.sandboxId.startsWith("pool-") && r.status === "running").map((r) => r.sandboxId)

layer(testLayer, { excludeTestServices: true, timeout: 120_000 })("host agent warm pool", (it) => {
  it.effect("a create takes a pool entry (via restore) with its env, limits and hostname; the pool refills; a stop destroys it", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host, { poolSize: 2 })
      const reports = yield* Reports
      const before = poolEntries(yield* eventually(agent.driver.list, (rows) => poolEntries(rows).length === 2))

      const sandboxId = makeSandboxId()
      yield* publishCommand(host.hostId, createCommand(sandboxId, { env: { GREETING: "from the pool" }, cpu: 2, ramMb: 96, exposedPorts: [8080] }))
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
        FsSync.readFileSync(NodePath.join("/sys/fs/cgroup", controller, "svc-sandboxes", host.hostId, sandboxId, file), "utf8").trim()
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

      yield* publishCommand(host.hostId, lifecycleCommand("destroy", sandboxId))
      yield* reports.waitFor(sandboxId, (r) => r.status === "destroyed")
      yield* agent.stop
      assert.deepStrictEqual(yield* agent.driver.list, [])
      assert.deepStrictEqual(processesOfHost(host.hostId), [])
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
