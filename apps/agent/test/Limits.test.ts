/**
 * What the agent does about limits and dead sandboxes, with real NATS and bubblewrap: it refuses
 * to start on a host that cannot limit sandboxes unless allowed, says in its host record which
 * limits hold, and reports `exited` (with why) for a sandbox whose init died, within seconds,
 * also one that died while no agent ran.
 */
import { assert, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { makeSandboxId } from "@svc/domain/Ids"
import { HostRecord, HOSTS_BUCKET_SPEC } from "@svc/host-protocol/Protocol"
import { Duration, Effect, Exit, Schema } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import {
  createCommand,
  createRunning,
  http,
  lifecycleCommand,
  makeHost,
  publishCommand,
  Reports,
  type RunningAgent,
  startAgent,
  testLayer
} from "../testing/Agent.ts"

const decodeHostRecord = Schema.decodeUnknownSync(Schema.fromJsonString(HostRecord))

const hostRecord = (hostId: string) =>
  Effect.gen(function*() {
    const nats = yield* Nats
    const kv = yield* Effect.promise(() => nats.kvm.open(nats.name(HOSTS_BUCKET_SPEC.name)))
    const entry = yield* Effect.promise(() => kv.get(hostId))
    return decodeHostRecord(new TextDecoder().decode(entry!.value))
  })

const execTrue = (agent: RunningAgent, sandboxId: string) =>
  http(agent, `/sandboxes/${sandboxId}/exec`, {
    method: "POST",
    body: JSON.stringify({ cmd: ["true"] }),
    headers: { "content-type": "application/json" }
  })

/** pid 1 of the sandbox as the host sees it (the driver's run record). */
const initPid = (agent: RunningAgent, sandboxId: string) =>
  (JSON.parse(FsSync.readFileSync(NodePath.join(agent.config.dataDir, "sandboxes", sandboxId, "run.json"), "utf8")) as {
    pid: number
  }).pid

layer(testLayer, { excludeTestServices: true, timeout: 120_000 })("host agent: limits and exits", (it) => {
  it.effect("refuses to start where no limit can be applied, unless allowed; the host record says which limits hold", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      // A cgroup root with nothing mounted: what a host without usable cgroups looks like.
      const bare = yield* Effect.acquireRelease(
        Effect.promise(() => Fs.mkdtemp("/tmp/svc-no-cgroups-")),
        (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
      )
      const refused = yield* Effect.exit(startAgent(host, { cgroupRoot: bare }))
      assert.isTrue(Exit.isFailure(refused))
      const error = Exit.isFailure(refused) ? String(refused.cause) : ""
      assert.match(error, /UnenforcedLimits/)
      assert.match(error, /memory: unavailable/)
      assert.match(error, /pids: unavailable/)
      assert.match(error, /SVC_AGENT_ALLOW_UNLIMITED=1/)

      const agent = yield* startAgent(host, { cgroupRoot: bare, allowUnlimited: true })
      const record = yield* hostRecord(host.hostId)
      assert.strictEqual(record.limits?.cgroup, "none")
      for (const name of ["memory", "cpu", "pids"] as const) assert.match(record.limits![name], /^unavailable: /)
      // Allowed: sandboxes run, without those limits.
      const sandboxId = yield* createRunning(agent)
      assert.strictEqual((yield* execTrue(agent, sandboxId)).status, 200)
      yield* publishCommand(host.hostId, lifecycleCommand("destroy", sandboxId))
      yield* (yield* Reports).waitFor(sandboxId, (r) => r.status === "destroyed")
    }))

  it.effect("a sandbox whose limits the host fails to apply after all is not run: its create fails, nothing is left", () =>
    Effect.gen(function*() {
      const reports = yield* Reports
      const host = yield* makeHost
      // The host's v1 hierarchies, reached through links, so that one can break after the probe.
      const root = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const dir = await Fs.mkdtemp("/tmp/svc-cgroup-v1-")
          for (const c of ["memory", "cpu", "cpuacct", "pids"]) {
            await Fs.symlink(`/sys/fs/cgroup/${c}`, NodePath.join(dir, c))
          }
          return dir
        }),
        (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
      )
      const agent = yield* startAgent(host, { cgroupRoot: root })
      assert.strictEqual(agent.driver.hostLimits.memory, "enforced")
      // The memory hierarchy breaks: the sandbox's memory group cannot be made.
      yield* Effect.promise(async () => {
        await Fs.rm(NodePath.join(root, "memory"))
        await Fs.mkdir(NodePath.join(root, "memory", "svc-sandboxes"), { recursive: true })
        await Fs.writeFile(NodePath.join(root, "memory", "cgroup.procs"), "")
        await Fs.writeFile(NodePath.join(root, "memory", "svc-sandboxes", host.hostId), "")
      })
      const sandboxId = makeSandboxId()
      yield* publishCommand(host.hostId, createCommand(sandboxId))
      const report = yield* reports.waitFor(sandboxId, () => true)
      assert.strictEqual(report.status, "failed")
      // The tenant reads the step; the driver's detail (which limit, the host path) is in the agent's log.
      assert.strictEqual(report.errorMessage, "limits failed on the host")
      assert.deepStrictEqual(yield* agent.driver.list, [])
    }))

  it.effect("an init killed from the host is reported exited with its signal; start brings it back", () =>
    Effect.gen(function*() {
      const reports = yield* Reports
      const host = yield* makeHost
      const agent = yield* startAgent(host)
      assert.deepStrictEqual((yield* hostRecord(host.hostId)).limits, {
        cgroup: "v1",
        memory: "enforced",
        cpu: "enforced",
        pids: "enforced",
        disk: "enforced"
      })
      const sandboxId = yield* createRunning(agent)
      const before = (yield* reports.of(sandboxId)).length
      process.kill(initPid(agent, sandboxId), "SIGKILL")
      const exited = yield* reports.waitFor(sandboxId, (r) => r.status === "exited", before)
      assert.strictEqual(exited.errorMessage, "killed by signal 9")
      const received = (yield* reports.all).find((r) => r.report === exited)
      assert.strictEqual(received?.msgId, `exited:${host.hostId}:${sandboxId}:${exited.at}`)
      assert.strictEqual((yield* execTrue(agent, sandboxId)).status, 409)

      // Reported once: later checks find nothing new.
      yield* Effect.sleep(Duration.millis(1_200))
      assert.strictEqual((yield* reports.of(sandboxId)).filter((r) => r.status === "exited").length, 1)

      const count = (yield* reports.of(sandboxId)).length
      yield* publishCommand(host.hostId, lifecycleCommand("start", sandboxId))
      const started = yield* reports.waitFor(sandboxId, (r) => r.status === "running", count)
      assert.isTrue(started.agentReady)
      assert.strictEqual((yield* execTrue(agent, sandboxId)).status, 200)
      assert.isAbove(started.at, exited.at)
    }))

  it.effect("a sandbox whose init died while no agent ran is reported exited by the next one", () =>
    Effect.gen(function*() {
      const reports = yield* Reports
      const host = yield* makeHost
      const first = yield* startAgent(host)
      const sandboxId = yield* createRunning(first)
      yield* first.stop
      process.kill(initPid(first, sandboxId), "SIGKILL")
      const before = (yield* reports.of(sandboxId)).length
      yield* startAgent(host)
      const exited = yield* reports.waitFor(sandboxId, (r) => r.status !== "running", before)
      assert.strictEqual(exited.status, "exited")
      assert.strictEqual(exited.errorMessage, "killed by signal 9")
    }))
})
