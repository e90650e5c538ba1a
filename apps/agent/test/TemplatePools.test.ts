/**
 * Templates and the warm pools: a template without layers served from the `base` pool still runs
 * its start_cmd and reports runtime_ready (issue 29's bug); a template's own pool keeps entries
 * booted (start_cmd run, ready_cmd passed), hands them out with runtime_ready at once, refills,
 * refuses a create whose env its start_cmd never saw, shrinks and drains.
 */
import { assert, layer } from "@effect/vitest"
import { sealEnv } from "@svc/crypto/SealedEnv"
import { makeSandboxId, makeTemplateId } from "@svc/domain/Ids"
import type { PoolEntry } from "@svc/host-protocol/Pools"
import { DriverExecRequest } from "@svc/host/Driver"
import { testSecretBox } from "@svc/testing/TestSecrets"
import { Effect } from "effect"
import {
  createCommand,
  eventually,
  lifecycleCommand,
  makeHost,
  poolEntries,
  publishCommand,
  Reports,
  startAgent,
  testLayer
} from "../testing/Agent.ts"

const START = "echo started > /tmp/s; sleep inf"

layer(testLayer, { excludeTestServices: true, timeout: 120_000 })("template warm pools", (it) => {
  it.effect("a template without layers served from the base pool runs its start_cmd and reports runtime_ready", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host, { poolSize: 1 })
      const reports = yield* Reports
      yield* eventually(agent.lifecycle.pool, (s) => s.ready.length === 1)

      const sandboxId = makeSandboxId()
      yield* publishCommand(
        host.hostId,
        createCommand(sandboxId, { image: { layers: [], startCmd: START, readyCmd: "test -f /tmp/go" } })
      )
      const running = yield* reports.waitFor(sandboxId, () => true)
      assert.strictEqual(running.status, "running", JSON.stringify(running))
      // Served by the pool, booted as the template's sandbox: its start_cmd ran, its ready_cmd is tried.
      assert.strictEqual(running.via, "restore")
      assert.strictEqual(running.runtimeReady, false)
      assert.strictEqual(running.runtimeReason, "ready_cmd has not passed yet")
      const seen = yield* eventually(
        agent.driver.exec(sandboxId, new DriverExecRequest({ cmd: ["cat", "/tmp/s"] })),
        (r) => r.exitCode === 0
      )
      assert.strictEqual(Buffer.from(seen.stdout).toString(), "started\n")
      yield* agent.driver.exec(sandboxId, new DriverExecRequest({ cmd: ["touch", "/tmp/go"] }))
      const ready = yield* reports.waitFor(sandboxId, (r) => r.runtimeReady === true)
      assert.strictEqual(ready.runtimeReason, null)

      yield* publishCommand(host.hostId, lifecycleCommand("destroy", sandboxId))
      yield* reports.waitFor(sandboxId, (r) => r.status === "destroyed")
    }))

  it.effect("a template's pool: booted entries handed out ready, refilled; other env cold-boots; shrink and drain", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host, { poolSize: 0 })
      const reports = yield* Reports
      const templateId = makeTemplateId()
      const env = { GREETING: "from the template" }
      const entry = (size: number): PoolEntry => ({
        templateId,
        hostId: host.hostId,
        size,
        root: "base",
        layers: [],
        sealedEnv: Effect.runSync(sealEnv(testSecretBox(), "transit", templateId, env)),
        startCmd: "echo \"$GREETING\" > /tmp/s; sleep inf",
        readyCmd: "test -f /tmp/s"
      })
      const image = { layers: [], startCmd: entry(0).startCmd, readyCmd: entry(0).readyCmd }
      yield* agent.lifecycle.setPool(entry(2))
      const full = yield* eventually(agent.lifecycle.pool, (s) => s.templates[templateId]?.ready.length === 2)
      const before = full.templates[templateId]!.ready
      // Each entry is booted: its start_cmd ran with the template's env.
      for (const id of before) {
        const out = yield* agent.driver.exec(id, new DriverExecRequest({ cmd: ["cat", "/tmp/s"] }))
        assert.strictEqual(Buffer.from(out.stdout).toString(), "from the template\n")
      }

      const sandboxId = makeSandboxId()
      yield* publishCommand(
        host.hostId,
        createCommand(sandboxId, { env, image, templateId, ramMb: 96, exposedPorts: [8080] })
      )
      const running = yield* reports.waitFor(sandboxId, () => true)
      assert.strictEqual(running.status, "running", JSON.stringify(running))
      assert.strictEqual(running.via, "restore")
      // Ready at once: the entry's ready_cmd passed before it was handed out.
      assert.strictEqual(running.runtimeReady, true)
      assert.strictEqual(running.runtimeReason, null)
      const rows = yield* agent.driver.list
      assert.strictEqual(before.filter((id) => rows.some((r) => r.sandboxId === id)).length, 1)
      const out = yield* agent.driver.exec(
        sandboxId,
        new DriverExecRequest({ cmd: ["sh", "-c", "cat /tmp/s; hostname"] })
      )
      assert.strictEqual(Buffer.from(out.stdout).toString(), `from the template\n${sandboxId}\n`)
      // Refilled in the background.
      yield* eventually(agent.lifecycle.pool, (s) => s.templates[templateId]?.ready.length === 2)

      // A create with env beyond the template's: its start_cmd must see it, so it cold-boots.
      const other = makeSandboxId()
      yield* publishCommand(
        host.hostId,
        createCommand(other, { env: { ...env, EXTRA: "1" }, image, templateId })
      )
      const cold = yield* reports.waitFor(other, () => true)
      assert.strictEqual(cold.via, "cold-boot")
      assert.strictEqual((yield* agent.lifecycle.pool).templates[templateId]!.ready.length, 2)

      // Smaller: the entries beyond the size are destroyed; removed: every entry goes.
      yield* agent.lifecycle.setPool(entry(1))
      assert.strictEqual((yield* agent.lifecycle.pool).templates[templateId]!.ready.length, 1)
      assert.strictEqual(poolEntries(yield* agent.driver.list).length, 1)
      yield* agent.lifecycle.dropPool(templateId)
      assert.strictEqual((yield* agent.lifecycle.pool).templates[templateId], undefined)
      yield* eventually(agent.driver.list, (rows) => poolEntries(rows).length === 0)

      for (const id of [sandboxId, other]) {
        yield* publishCommand(host.hostId, lifecycleCommand("destroy", id))
        yield* reports.waitFor(id, (r) => r.status === "destroyed")
      }
    }))
})
