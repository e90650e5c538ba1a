/**
 * This host's share of the templates' warm pools (docs/architecture.md#warm-pools): a watch on
 * the `pools` KV bucket (@svc/host-protocol/Pools), where the control plane puts a template's
 * pool (its size, image and host) and deletes it. An entry naming this host is kept by
 * `LocalSandboxes.setPool`; one naming another host, or deleted, is drained here.
 *
 * The watch starts with the last operation of every key: a restarted agent makes its pools again.
 * Entries are applied one at a time in the watch's order; one that cannot be prepared (a layer
 * not pulled yet) is tried again after a while unless a newer one for its template came meanwhile.
 */
import { BusError } from "@svc/bus/Nats"
import { ensureBucket } from "@svc/bus/Topology"
import { POOL_KEY_PREFIX, PoolEntry, POOLS_BUCKET_SPEC } from "@svc/host-protocol/Pools"
import { Context, Duration, Effect, Layer, Queue, Schema } from "effect"
import { retryForever } from "./Commands.ts"
import { AgentConfig } from "./Config.ts"
import { LocalSandboxes } from "./LocalSandboxes.ts"

const decodeEntry = Schema.decodeUnknownOption(Schema.fromJsonString(PoolEntry))
const textDecoder = new TextDecoder()

type Change = { readonly templateId: string; readonly entry: PoolEntry | undefined; readonly seq: number }

export class TemplatePools extends Context.Service<TemplatePools, {
  /** The templates whose pools this host keeps now (for tests and logs). */
  readonly kept: Effect.Effect<ReadonlySet<string>>
}>()("@svc/agent/TemplatePools") {
  static readonly layer = Layer.effect(
    TemplatePools,
    Effect.gen(function*() {
      const config = yield* AgentConfig
      const lifecycle = yield* LocalSandboxes
      const kept = new Set<string>()
      const latest = new Map<string, number>()
      const changes = yield* Queue.unbounded<Change>()
      let seq = 0
      const offer = (templateId: string, entry: PoolEntry | undefined) => {
        seq++
        latest.set(templateId, seq)
        Queue.offerUnsafe(changes, { templateId, entry, seq })
      }

      const apply = (change: Change) =>
        Effect.gen(function*() {
          // A newer change of the same template supersedes this one.
          if (latest.get(change.templateId) !== change.seq) return
          const { entry, templateId } = change
          if (entry === undefined || entry.hostId !== config.hostId || entry.size === 0) {
            kept.delete(templateId)
            return yield* lifecycle.dropPool(templateId)
          }
          const set = yield* Effect.result(lifecycle.setPool(entry))
          if (set._tag === "Success") {
            kept.add(templateId)
            return
          }
          yield* Effect.logWarning("agent: a template's warm pool could not be prepared", {
            templateId,
            error: set.failure
          })
          // Tried again later, unless superseded by then.
          yield* Effect.forkScoped(
            Effect.andThen(Effect.sleep(Duration.seconds(5)), Effect.sync(() => Queue.offerUnsafe(changes, change)))
          )
        })
      yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(changes), apply)))

      const watch = Effect.gen(function*() {
        const kv = yield* ensureBucket(POOLS_BUCKET_SPEC)
        const watcher = yield* Effect.acquireRelease(
          Effect.tryPromise({
            try: () => kv.watch(),
            catch: (cause) => new BusError({ operation: "watch pools", message: String(cause) })
          }),
          (w) => Effect.sync(() => w.stop())
        )
        yield* Effect.tryPromise({
          try: async () => {
            for await (const e of watcher) {
              if (!e.key.startsWith(POOL_KEY_PREFIX)) continue
              const templateId = e.key.slice(POOL_KEY_PREFIX.length)
              if (e.operation === "DEL" || e.operation === "PURGE") {
                offer(templateId, undefined)
                continue
              }
              const entry = decodeEntry(textDecoder.decode(e.value))
              offer(templateId, entry._tag === "Some" ? entry.value : undefined)
            }
          },
          catch: (cause) => new BusError({ operation: "watch pools", message: String(cause) })
        })
        return yield* new BusError({ operation: "watch pools", message: "watch ended" })
      }).pipe(Effect.scoped)
      yield* Effect.forkScoped(retryForever("watching the pools bucket", watch))
      return TemplatePools.of({ kept: Effect.sync(() => new Set(kept)) })
    })
  )
}
