/**
 * The host agent's share of create → running: a `create` command published on the AGENT stream
 * → the `running` report (agentReady) on the sandbox actor's mailbox, against the bare driver
 * (create + first exec of `true`: the moment a command could run) in the same run, on a
 * throwaway NATS. The agent's `agentReady` is its create's init ready byte, no exec of its own.
 *   node apps/agent/bench/agent.ts          (BENCH_SANDBOXES=30 by default)
 *
 * Prints p50/p99 of sequential creates (one at a time: latency) and of a burst (all published
 * at once: queueing and throughput, creates per second).
 */
import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream"
import { streamName } from "@svc/actors/Actor"
import { Nats } from "@svc/bus/Nats"
import { ensureConsumer, ensureStream } from "@svc/bus/Topology"
import { sealEnv } from "@svc/crypto/SealedEnv"
import { SecretBox } from "@svc/crypto/SecretBox"
import { makeHostId, makeSandboxId } from "@svc/domain/Ids"
import { agentSubject } from "@svc/host-protocol/Protocol"
import { DriverExecRequest, SandboxDriver, SandboxSpec } from "@svc/host/Driver"
import { CONTROLLERS } from "@svc/host/Driver/Cgroups"
import { startNats } from "@svc/local-servers/Servers"
import { SandboxActor } from "@svc/sandboxes/SandboxActor"
import { testSecretBox, useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Context, Effect, Layer } from "effect"
import * as Fs from "node:fs/promises"
import { AgentRole } from "../src/Agent.ts"
import { CommandConsumer } from "../src/Commands.ts"
import { AgentConfig, Concurrency } from "../src/Config.ts"

const N = Number(process.env["BENCH_SANDBOXES"] ?? 30)

const quantile = (values: ReadonlyArray<number>, q: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? 0
}
const line = (label: string, values: ReadonlyArray<number>) =>
  console.log(
    `${label.padEnd(44)} p50 ${quantile(values, 0.5).toFixed(1).padStart(7)} ms   p99 ${
      quantile(values, 0.99).toFixed(1).padStart(7)
    } ms`
  )

const program = Effect.gen(function*() {
  const server = yield* Effect.acquireRelease(Effect.promise(() => startNats()), (s) => Effect.promise(() => s.stop()))
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-agent-")),
    (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
  )
  const hostId = makeHostId()
  yield* Effect.addFinalizer(() =>
    Effect.promise(async () => {
      for (const c of CONTROLLERS) await Fs.rmdir(`/sys/fs/cgroup/${c}/svc-sandboxes/${hostId}`).catch(() => undefined)
    })
  )
  const natsLayer = Layer.effect(Nats, Nats.make({ url: server.url, prefix: "bench", name: "bench" }))
  // The agent's own setting, read where it is defined (`Config.ts`).
  const concurrency = yield* Concurrency
  const context = yield* Layer.build(
    AgentRole.layerWith({ hostId, dataDir, concurrency }).pipe(
      Layer.provideMerge(natsLayer),
      Layer.provide(SecretBox.layer)
    )
  )
  const nats = Context.get(context, Nats)
  const driver = Context.get(context, SandboxDriver)
  yield* Context.get(context, CommandConsumer).ready
  // Everything the host still has is destroyed before the agent stops.
  yield* Effect.addFinalizer(() =>
    driver.list.pipe(
      Effect.flatMap((rows) => Effect.forEach(rows, (r) => Effect.ignore(driver.destroy(r.sandboxId)))),
      Effect.ignore
    )
  )

  // The actor's mailbox, read directly: when did each `running` report arrive.
  const arrived = new Map<string, number>()
  const waiters = new Map<string, () => void>()
  const stream = yield* ensureStream({
    name: streamName(SandboxActor),
    subjects: ["actor.sandbox.>"],
    retention: "workqueue"
  }).pipe(
    Effect.provideService(Nats, nats)
  )
  const { consumer: durable } = yield* ensureConsumer(streamName(SandboxActor), {
    durable_name: "bench_reports",
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: "actor.sandbox.>"
  }).pipe(Effect.provideService(Nats, nats))
  const consumer = yield* Effect.promise(() => nats.js.consumers.get(stream, durable))
  const messages = yield* Effect.promise(() =>
    consumer.consume({
      callback: (msg: JsMsg) => {
        const report = JSON.parse(new TextDecoder().decode(msg.data)) as { sandboxId: string; status: string }
        msg.ack()
        if (report.status === "running" || report.status === "failed") {
          arrived.set(report.sandboxId, performance.now())
          waiters.get(report.sandboxId)?.()
        }
      }
    })
  )
  yield* Effect.addFinalizer(() => Effect.promise(() => messages.close().catch(() => undefined)))

  const encoder = new TextEncoder()
  const publishCreate = (sandboxId: string) =>
    nats.js.publish(
      nats.subject(...agentSubject(hostId, "create")),
      encoder.encode(JSON.stringify({
        _tag: "create",
        sandboxId,
        orgId: "org_00000000000000000000000000",
        resources: {
          template: "base",
          sealedEnv: Effect.runSync(sealEnv(testSecretBox(), "transit", sandboxId, {})),
          cpu: 1,
          ramMb: 128,
          diskGb: 1,
          exposedPorts: []
        }
      })),
      { msgID: `bench-${sandboxId}` }
    )
  const reported = (sandboxId: string) =>
    new Promise<void>((resolve) => (arrived.has(sandboxId) ? resolve() : waiters.set(sandboxId, resolve)))

  const destroyAll = Effect.flatMap(
    driver.list,
    (rows) => Effect.forEach(rows, (r) => Effect.ignore(driver.destroy(r.sandboxId)))
  )

  // Warm-up: one of each.
  const warm = makeSandboxId()
  yield* Effect.promise(() => publishCreate(warm).then(() => reported(warm)))
  yield* destroyAll

  const bare: Array<number> = []
  for (let i = 0; i < N; i++) {
    const id = makeSandboxId()
    const t0 = performance.now()
    yield* driver.create(
      new SandboxSpec({ sandboxId: id, template: "base", env: {}, cpu: 1, ramMb: 128, diskGb: 1, exposedPorts: [] })
    )
    yield* driver.exec(id, new DriverExecRequest({ cmd: ["true"] }))
    bare.push(performance.now() - t0)
  }
  yield* destroyAll

  const sequential: Array<number> = []
  for (let i = 0; i < N; i++) {
    const id = makeSandboxId()
    const t0 = performance.now()
    yield* Effect.promise(() => publishCreate(id).then(() => reported(id)))
    sequential.push(performance.now() - t0)
  }
  yield* destroyAll

  const burstIds = Array.from({ length: N }, () => makeSandboxId())
  const starts = new Map<string, number>()
  const burstStart = performance.now()
  yield* Effect.promise(() =>
    Promise.all(burstIds.map((id) => {
      starts.set(id, performance.now())
      return publishCreate(id)
    }))
  )
  yield* Effect.promise(() => Promise.all(burstIds.map(reported)))
  const burstSeconds = (performance.now() - burstStart) / 1000
  const burst = burstIds.map((id) => arrived.get(id)! - starts.get(id)!)
  yield* destroyAll

  console.log(
    `host agent, ${N} sandboxes of the base template, ${Context.get(context, AgentConfig).concurrency} commands at once`
  )
  line("bare driver: create + first exec", bare)
  line("agent: command → running report (one by one)", sequential)
  line("agent: command → running report (burst)", burst)
  console.log(`${"agent: burst throughput".padEnd(44)} ${(N / burstSeconds).toFixed(1)} creates/s`)
})

useTestEncryptionKeys()
Effect.runPromise(Effect.scoped(program)).catch((e) => {
  console.error(e)
  process.exit(1)
})
