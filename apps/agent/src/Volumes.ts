/**
 * Removes the storage of deleted volumes from this host: a watch on the `volumes` KV bucket
 * (@svc/host-protocol/Volumes), where the control plane deletes `volume.<id>` in the
 * transaction that deletes the volume. A deleted entry makes the driver remove the volume's
 * local image (if this host holds it) and its shared image and machine-wide mount (if this
 * machine has them): both are idempotent, so every agent of a machine may try.
 *
 * The watch starts with the last operation of every key, deletions included: an agent that was
 * down when a volume was deleted removes its image when it starts again. A removal that fails
 * is retried with a backoff, without holding up the others.
 */
import { BusError } from "@svc/bus/Nats"
import { ensureBucket } from "@svc/bus/Topology"
import { VOLUMES_BUCKET_SPEC } from "@svc/host-protocol/Volumes"
import { SandboxDriver } from "@svc/host/Driver"
import { Context, Duration, Effect, FiberSet, Layer, Schedule } from "effect"
import { retryForever } from "./Commands.ts"

const PREFIX = "volume."

export class VolumeReaper extends Context.Service<VolumeReaper, {
  /** Volumes whose storage was removed (or found absent) since start (for tests and logs). */
  readonly removed: Effect.Effect<ReadonlySet<string>>
}>()("@svc/agent/VolumeReaper") {
  static readonly layer = Layer.effect(
    VolumeReaper,
    Effect.gen(function*() {
      const driver = yield* SandboxDriver
      const removed = new Set<string>()
      const remove = (volumeId: string) =>
        Effect.gen(function*() {
          yield* driver.removeVolume(volumeId, "local")
          yield* driver.removeVolume(volumeId, "shared")
          removed.add(volumeId)
        }).pipe(
          Effect.tapError((e) =>
            Effect.logWarning("agent: removing a deleted volume failed", { volumeId, error: e.message })
          ),
          Effect.retry(
            Schedule.min([Schedule.exponential(Duration.millis(500)), Schedule.spaced(Duration.minutes(1))])
          ),
          Effect.ignore
        )
      // Removals run beside the watch, and end with the agent.
      const jobs = yield* FiberSet.make<void, never>()
      const run = yield* FiberSet.runtime(jobs)<never>()
      const watch = Effect.gen(function*() {
        const kv = yield* ensureBucket(VOLUMES_BUCKET_SPEC)
        const watcher = yield* Effect.acquireRelease(
          Effect.tryPromise({
            try: () => kv.watch(),
            catch: (cause) => new BusError({ operation: "watch volumes", message: String(cause) })
          }),
          (w) => Effect.sync(() => w.stop())
        )
        yield* Effect.tryPromise({
          try: async () => {
            for await (const e of watcher) {
              if ((e.operation === "DEL" || e.operation === "PURGE") && e.key.startsWith(PREFIX)) {
                run(remove(e.key.slice(PREFIX.length)))
              }
            }
          },
          catch: (cause) => new BusError({ operation: "watch volumes", message: String(cause) })
        })
        return yield* new BusError({ operation: "watch volumes", message: "watch ended" })
      }).pipe(Effect.scoped)
      yield* Effect.forkScoped(retryForever("watching the volumes bucket", watch))
      return VolumeReaper.of({ removed: Effect.sync(() => new Set(removed)) })
    })
  )
}
