/** On a 3-node JetStream cluster, a stream with 3 replicas loses nothing when a node dies. */
import { describe, expect, it } from "@effect/vitest"
import { publish } from "@svc/bus/Codec"
import { Nats } from "@svc/bus/Nats"
import { ensureStream } from "@svc/bus/Topology"
import { startNatsCluster } from "@svc/local-servers/Servers"
import { Duration, Effect, Layer, Schedule, Schema } from "effect"

const Item = Schema.Struct({ n: Schema.Int })

const retrying = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.retry(effect, { schedule: Schedule.spaced(Duration.millis(200)), times: 75 })

describe("NATS cluster", () => {
  it.live(
    "a replicated stream keeps every message and accepts new ones after a node is killed",
    () =>
      Effect.gen(function*() {
        const cluster = yield* Effect.acquireRelease(
          Effect.promise(() => startNatsCluster(3)),
          (c) => Effect.promise(c.stop)
        )
        yield* Effect.gen(function*() {
          const nats = yield* Nats
          // The cluster elects a meta leader shortly after start: retry the declaration until it does.
          yield* ensureStream({ name: "ITEMS", subjects: ["item.>"], replicas: 3 }).pipe(retrying)
          const send = publish(Item)
          for (let n = 0; n < 50; n++) yield* send(nats.subject("item", "a"), { n }, { msgID: `m${n}` })

          const info = yield* Effect.promise(() => nats.jsm.streams.info(nats.name("ITEMS")))
          expect(info.config.num_replicas).toBe(3)
          // Kill the node holding the stream's leadership: the worst case.
          const leader = info.cluster?.leader
          const victim = Math.max(0, cluster.nodes.findIndex((_, i) => `n${i + 1}` === leader))
          yield* Effect.promise(() => cluster.kill(victim))

          for (let n = 50; n < 100; n++) {
            // A publish during the leader election fails; the client retries it (same msgID).
            yield* send(nats.subject("item", "a"), { n }, { msgID: `m${n}` }).pipe(retrying)
          }
          const after = yield* Effect.promise(() => nats.jsm.streams.info(nats.name("ITEMS")))
          expect(after.state.messages).toBe(100)
          expect(after.cluster?.leader).not.toBe(leader)
        }).pipe(Effect.provide(Layer.effect(Nats, Nats.make({ url: cluster.urls.join(","), prefix: "c" }))))
      }).pipe(Effect.scoped),
    60_000
  )
})
