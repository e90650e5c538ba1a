/**
 * What the data plane adds to an exec: `exec` of `true` in one running sandbox through the API's
 * data-plane client and the agent's data-plane server (HTTP on loopback, bearer token, JSON both
 * ways) against the bare driver's `exec` of the same command, in the same run.
 *   node apps/agent/bench/exec.ts      (BENCH_RUNS=5 rounds of BENCH_EXECS=60 execs each)
 *
 * Each round runs the bare execs, then the data-plane ones, one at a time (latency, not
 * throughput); a round's figure is its median, and the result the median of the rounds.
 */
import { SecretBox } from "@svc/crypto/SecretBox"
import { makeHostId, makeSandboxId } from "@svc/domain/Ids"
import type { HostRecord } from "@svc/host-protocol/Protocol"
import { DriverExecRequest, SandboxDriver, SandboxSpec } from "@svc/host/Driver"
import { BubblewrapDriver } from "@svc/host/Driver/Bubblewrap"
import { AgentClient } from "@svc/hosts/AgentClient"
import { cleanUpHost } from "@svc/testing/TestHost"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Context, Effect, Layer } from "effect"
import { execSync } from "node:child_process"
import * as Fs from "node:fs/promises"
import { DriverConfigFromAgent } from "../src/Agent.ts"
import { AgentConfig } from "../src/Config.ts"
import { DataPlaneEndpoint } from "../src/DataPlaneEndpoint.ts"

const RUNS = Number(process.env["BENCH_RUNS"] ?? 5)
const EXECS = Number(process.env["BENCH_EXECS"] ?? 60)
const WARM_UP = 20

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

const commit = () => {
  try {
    return execSync("git rev-parse --short HEAD", { encoding: "utf8" }).trim()
  } catch {
    return "unknown"
  }
}

const program = Effect.gen(function*() {
  const host = yield* Effect.acquireRelease(
    Effect.promise(async () => ({ hostId: makeHostId(), dataDir: await Fs.mkdtemp("/tmp/svc-bench-exec-") })),
    cleanUpHost
  )
  const context = yield* Layer.build(
    DataPlaneEndpoint.layer.pipe(
      Layer.provideMerge(BubblewrapDriver.layer.pipe(Layer.provide(DriverConfigFromAgent))),
      Layer.provideMerge(AgentConfig.layer({ hostId: host.hostId, dataDir: host.dataDir, poolSize: 0 })),
      Layer.provide(SecretBox.layer),
      Layer.merge(AgentClient.layer)
    )
  )
  const driver = Context.get(context, SandboxDriver)
  const dataPlane = Context.get(context, DataPlaneEndpoint)
  const client = Context.get(context, AgentClient)
  const record: HostRecord = {
    hostId: host.hostId,
    region: "local",
    datacenter: "local-1",
    version: "bench",
    capacity: { cpu: 1, ramMb: 1024, diskGb: 1 },
    endpoint: dataPlane.endpoint,
    token: dataPlane.token,
    heartbeatAt: Date.now(),
    startedAt: Date.now()
  }

  const id = makeSandboxId()
  yield* driver.create(
    new SandboxSpec({ sandboxId: id, template: "base", env: {}, cpu: 1, ramMb: 128, diskGb: 1, exposedPorts: [] })
  )
  const bare = Effect.asVoid(driver.exec(id, new DriverExecRequest({ cmd: ["true"] })))
  const through = Effect.asVoid(client.exec(record, id, { cmd: ["true"] }))
  const timed = (effect: Effect.Effect<void, unknown>) =>
    Effect.gen(function*() {
      const times: Array<number> = []
      for (let i = 0; i < EXECS; i++) {
        const t0 = performance.now()
        yield* effect
        times.push(performance.now() - t0)
      }
      return median(times)
    })

  for (let i = 0; i < WARM_UP; i++) yield* Effect.andThen(bare, through)

  const bareMedians: Array<number> = []
  const planeMedians: Array<number> = []
  for (let run = 0; run < RUNS; run++) {
    bareMedians.push(yield* timed(bare))
    planeMedians.push(yield* timed(through))
  }
  const b = median(bareMedians)
  const p = median(planeMedians)
  console.log(
    `exec of \`true\`, one sandbox, ${RUNS} rounds of ${EXECS} (commit ${commit()}, ${new Date().toISOString()})`
  )
  console.log(`rounds, bare driver   ${bareMedians.map((v) => v.toFixed(2)).join("  ")} ms`)
  console.log(`rounds, data plane    ${planeMedians.map((v) => v.toFixed(2)).join("  ")} ms`)
  console.log(`bare driver exec      ${b.toFixed(2)} ms (median)`)
  console.log(`through data plane    ${p.toFixed(2)} ms (median)`)
  console.log(`data plane adds       ${(p - b).toFixed(2)} ms per exec (ratio ${(p / b).toFixed(2)})`)
})

useTestEncryptionKeys()
Effect.runPromise(Effect.scoped(program)).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
