/**
 * The agent as a separate process (`node apps/agent/src/main.ts`), killed with SIGKILL while
 * creates are in flight, then started again on the same host id and data dir.
 */
import { assert, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import { makeSandboxId } from "@svc/domain/Ids"
import { SandboxDriver } from "@svc/host/Driver"
import { BubblewrapDriver } from "@svc/host/Driver/Bubblewrap"
import { DriverConfig } from "@svc/host/Driver/Config"
import { vethNames } from "@svc/host/Driver/Network"
import { processCgroupsOfHost, processesOfHost } from "@svc/testing/HostProcesses"
import * as TestNats from "@svc/testing/TestNats"
import { spawnRole } from "@svc/testing/TestProcess"
import { Context, Effect, Layer } from "effect"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { Journal } from "../src/Journal.ts"
import {
  createCommand,
  eventually,
  http,
  lifecycleCommand,
  makeHost,
  publishCommand,
  Reports,
  type TestHost,
  testLayer
} from "../testing/Agent.ts"

const MAIN = NodePath.resolve(NodePath.dirname(fileURLToPath(import.meta.url)), "../src/main.ts")

/** The agent process, ready once it prints its `agent_ready` line (with its data-plane endpoint). */
const spawnAgent = (host: TestHost, poolSize = 0) =>
  Effect.gen(function*() {
    const server = yield* TestNats.TestNatsServer
    const role = yield* spawnRole({
      main: MAIN,
      env: {
        NATS_URL: server.url,
        SVC_NATS_PREFIX: server.prefix,
        SVC_HOST_ID: host.hostId,
        SVC_AGENT_DATA_DIR: host.dataDir,
        SVC_AGENT_CONCURRENCY: "4",
        SVC_AGENT_POOL_SIZE: String(poolSize)
      },
      ready: (stdout) => {
        const line = /\{"event":"agent_ready"[^\n]*\}/.exec(stdout)
        return line ? (JSON.parse(line[0]).endpoint as string) : undefined
      }
    })
    return { ...role, endpoint: role.ready }
  })

/** The agent's data-plane token, from its host record (where the API finds it too). */
const dataPlaneToken = (host: TestHost) =>
  Effect.gen(function*() {
    const nats = yield* Nats
    return yield* Effect.promise(async () => {
      const kv = await nats.kvm.open(nats.name("hosts"))
      const entry = await kv.get(host.hostId)
      return (JSON.parse(new TextDecoder().decode(entry!.value)) as { token: string }).token
    })
  })

/** The driver's own view of the host's data dir (read-only use: listing). */
const driverOf = (host: TestHost) =>
  Effect.map(
    Layer.build(BubblewrapDriver.layer.pipe(
      Layer.provide(Layer.succeed(DriverConfig, DriverConfig.make({ dataDir: host.dataDir, hostId: host.hostId }))),
      Layer.provide(SecretBox.layer)
    )),
    (context) => Context.get(context, SandboxDriver)
  )

layer(testLayer, { excludeTestServices: true, timeout: 120_000 })("host agent process", (it) => {
  it.effect("kill -9 while creates are in flight: after a restart every sandbox converges to running or failed, nothing is orphaned", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const reports = yield* Reports
      const first = yield* spawnAgent(host)

      const ids = Array.from({ length: 6 }, () => makeSandboxId())
      for (const id of ids) yield* publishCommand(host.hostId, createCommand(id))
      // Kill as soon as the first sandbox is reported: the others are queued or half made.
      yield* eventually(reports.all, (all) => all.length >= 1)
      first.process.kill("SIGKILL")
      yield* Effect.promise(() => first.exited)
      const reportedBeforeCrash = (yield* reports.all).length

      const second = yield* spawnAgent(host)
      const final = new Map<string, string>()
      yield* eventually(
        Effect.gen(function*() {
          for (const id of ids) {
            const rs = yield* reports.of(id)
            const last = rs.at(-1)
            if (last !== undefined) final.set(id, last.status)
          }
          return [...final.values()]
        }),
        (statuses) => statuses.length === ids.length && statuses.every((s) => s === "running" || s === "failed")
      )
      // Something happened after the crash (the test really crashed mid-way).
      assert.isAbove((yield* reports.all).length, reportedBeforeCrash)

      // The disk agrees with the reports: exactly the running ones exist, and they work.
      const driver = yield* driverOf(host)
      const running = ids.filter((id) => final.get(id) === "running")
      const listed = yield* driver.list
      assert.sameMembers(listed.map((r) => r.sandboxId), running)
      assert.isTrue(listed.every((r) => r.status === "running"))
      const token = yield* dataPlaneToken(host)
      const agent = { dataPlane: { endpoint: second.endpoint, token } }
      for (const id of running) {
        const response = yield* http(agent, `/sandboxes/${id}/exec`, {
          method: "POST",
          body: JSON.stringify({ cmd: ["cat", "/etc/svc-template"] })
        })
        assert.strictEqual(response.status, 200)
        assert.strictEqual(response.json.stdout, "base\n")
      }
      const journal = yield* Journal.make(NodePath.join(host.dataDir, "agent", "journal"))
      assert.sameDeepMembers(
        (yield* journal.list).map((e) => [e.sandboxId, e.pending]),
        running.map((id) => [id, null])
      )

      // Destroy them all; stop the agent; nothing of them is left on the machine.
      const ips = listed.map((r) => r.internalIp)
      for (const id of ids) yield* publishCommand(host.hostId, lifecycleCommand("destroy", id))
      for (const id of ids) yield* reports.waitFor(id, (r) => r.status === "destroyed")
      second.process.kill("SIGTERM")
      // A graceful stop: Effect's exit code for an interrupted main (130), not a crash (1).
      assert.strictEqual(yield* Effect.promise(() => second.exited), 130, second.output())
      assert.deepStrictEqual(yield* driver.list, [])
      assert.deepStrictEqual(processesOfHost(host.hostId), [])
      assert.deepStrictEqual(FsSync.readdirSync(NodePath.join(host.dataDir, "sandboxes")), [])
      // Other test files lease addresses from the same machine-wide pool at the same time: a
      // veth of one of our addresses may exist again, but then it belongs to someone else's lease.
      const leaseDir = DriverConfig.make({ dataDir: host.dataDir, hostId: host.hostId }).leaseDir
      for (const ip of ips) {
        if (!FsSync.existsSync(`/sys/class/net/${vethNames(ip).host}`)) continue
        const owner = FsSync.existsSync(NodePath.join(leaseDir, ip))
          ? FsSync.readFileSync(NodePath.join(leaseDir, ip), "utf8")
          : ""
        assert.notInclude(owner, host.dataDir, `veth of ${ip} left behind`)
      }
    }))
})

const isPoolEntry = (id: string) => id.startsWith("pool-")

layer(testLayer, { excludeTestServices: true, timeout: 120_000 })("host agent process with a warm pool", (it) => {
  it.effect("kill -9 while creates take pool entries: every sandbox converges, no entry is used twice or orphaned", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const reports = yield* Reports
      const driver = yield* driverOf(host)
      const first = yield* spawnAgent(host, 2)
      const before = yield* eventually(
        driver.list,
        (rows) => rows.filter((r) => isPoolEntry(r.sandboxId) && r.status === "running").length === 2
      )
      const oldEntries = before.map((r) => r.sandboxId)

      const ids = Array.from({ length: 4 }, () => makeSandboxId())
      for (const id of ids) yield* publishCommand(host.hostId, createCommand(id, { env: { WHO: id } }))
      yield* eventually(reports.all, (all) => all.length >= 1)
      first.process.kill("SIGKILL")
      yield* Effect.promise(() => first.exited)

      const second = yield* spawnAgent(host, 2)
      const final = new Map<string, string>()
      yield* eventually(
        Effect.gen(function*() {
          for (const id of ids) {
            const last = (yield* reports.of(id)).at(-1)
            if (last !== undefined) final.set(id, last.status)
          }
          return [...final.values()]
        }),
        (statuses) => statuses.length === ids.length && statuses.every((s) => s === "running" || s === "failed")
      )
      const running = ids.filter((id) => final.get(id) === "running")
      // The restarted agent makes its own pool; entries of the killed one were destroyed or adopted.
      // (An entry being made is listed `stopped` until its init runs.)
      const listed = yield* eventually(
        driver.list,
        (rows) => rows.filter((r) => isPoolEntry(r.sandboxId)).length === 2 && rows.every((r) => r.status === "running")
      )
      assert.sameMembers(listed.filter((r) => !isPoolEntry(r.sandboxId)).map((r) => r.sandboxId), running)
      for (const row of listed) assert.notInclude(oldEntries, row.sandboxId)
      assert.isTrue(listed.every((r) => r.status === "running"))
      // One process tree each (no entry shared by two sandboxes), and every process of the host
      // belongs to a sandbox on the disk.
      const pids = listed.map((r) => r.pid)
      assert.strictEqual(new Set(pids).size, pids.length)
      const known = new Set(listed.map((r) => r.sandboxId))
      for (const { cgroup, pid } of processCgroupsOfHost(host.hostId)) {
        const owner = new RegExp(`/svc-sandboxes/${host.hostId}/([^/\\n]+)`).exec(cgroup)?.[1]
        assert.isTrue(owner !== undefined && known.has(owner), `process ${pid} in ${cgroup}`)
      }
      const token = yield* dataPlaneToken(host)
      const agent = { dataPlane: { endpoint: second.endpoint, token } }
      for (const id of running) {
        const response = yield* http(agent, `/sandboxes/${id}/exec`, {
          method: "POST",
          body: JSON.stringify({ cmd: ["sh", "-c", "echo $WHO; hostname"] })
        })
        assert.strictEqual(response.status, 200)
        assert.strictEqual(response.json.stdout, `${id}\n${id}\n`)
      }

      // Destroy them; a graceful stop destroys the pool: nothing is left.
      for (const id of ids) yield* publishCommand(host.hostId, lifecycleCommand("destroy", id))
      for (const id of ids) yield* reports.waitFor(id, (r) => r.status === "destroyed")
      second.process.kill("SIGTERM")
      assert.strictEqual(yield* Effect.promise(() => second.exited), 130, second.output())
      assert.deepStrictEqual(yield* driver.list, [])
      assert.deepStrictEqual(processesOfHost(host.hostId), [])
      assert.deepStrictEqual(FsSync.readdirSync(NodePath.join(host.dataDir, "sandboxes")), [])
    }))
})
