/**
 * The host's record in the `hosts` KV bucket: capacity (cpu overcommitted), region, datacenter,
 * version, which sandbox limits hold here, the image layers and roots it holds, and the data plane's
 * endpoint and token, written at start and refreshed every `heartbeatMs`. When the agent
 * stops the refreshing stops and the record ages; deciding that the host is down is the control
 * plane's (`HOST_DOWN_AFTER_MS`). The record is not deleted on a graceful stop: the sandboxes
 * keep running and a restarted agent overwrites it.
 */
import { ensureBucket } from "@svc/bus/Topology"
import { HostRecord, HOSTS_BUCKET_SPEC } from "@svc/host-protocol/Protocol"
import { SandboxDriver } from "@svc/host/Driver"
import { Context, Duration, Effect, Layer, Schema } from "effect"
import { AgentConfig } from "./Config.ts"
import { DataPlaneEndpoint } from "./DataPlaneEndpoint.ts"
import { LocalSandboxes } from "./LocalSandboxes.ts"

const encodeRecord = Schema.encodeSync(Schema.fromJsonString(HostRecord))
const encoder = new TextEncoder()

export class HostRegistry extends Context.Service<HostRegistry, {
  /** The record as last written. */
  readonly current: Effect.Effect<HostRecord>
}>()("@svc/agent/HostRegistry") {
  static readonly layer = Layer.effect(
    HostRegistry,
    Effect.gen(function*() {
      const config = yield* AgentConfig
      const dataPlane = yield* DataPlaneEndpoint
      const driver = yield* SandboxDriver
      const lifecycle = yield* LocalSandboxes
      const kv = yield* ensureBucket(HOSTS_BUCKET_SPEC)
      const startedAt = Date.now()
      let current: HostRecord | undefined

      const beat = Effect.gen(function*() {
        // What images it holds, for placement; a listing that fails leaves them out this time.
        const layers = yield* driver.layers.pipe(Effect.orElseSucceed(() => undefined))
        const roots = yield* driver.roots.pipe(Effect.orElseSucceed(() => undefined))
        // Ready entries of the template pools here: the scheduler sends their creates to this host.
        const pools = Object.fromEntries(
          Object.entries((yield* lifecycle.pool).templates).map(([id, p]) => [id, p.ready.length])
        )
        const record: HostRecord = {
          hostId: config.hostId,
          region: config.region,
          datacenter: config.datacenter,
          version: config.version,
          capacity: config.capacity,
          endpoint: dataPlane.endpoint,
          token: dataPlane.token,
          heartbeatAt: Date.now(),
          startedAt,
          limits: driver.hostLimits,
          cpuOvercommit: config.cpuOvercommit,
          ...(layers !== undefined ? { layers } : {}),
          ...(roots !== undefined ? { roots } : {}),
          ...(Object.keys(pools).length > 0 ? { pools } : {})
        }
        yield* Effect.tryPromise(() => kv.put(config.hostId, encoder.encode(encodeRecord(record))))
        current = record
      })

      // The first write must work: a host nobody can see is of no use.
      yield* beat
      yield* Effect.forkScoped(
        Effect.forever(
          Effect.andThen(
            Effect.sleep(Duration.millis(config.heartbeatMs)),
            beat.pipe(
              Effect.catchCause((cause) => Effect.logWarning("agent: heartbeat failed", { cause: String(cause) }))
            )
          )
        )
      )
      return HostRegistry.of({ current: Effect.sync(() => current!) })
    })
  )
}
