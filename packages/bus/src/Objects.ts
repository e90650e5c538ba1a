/**
 * JetStream object stores under the prefix (`@nats-io/obj`): large content-addressed blobs that
 * every process reaches (image layers, `@svc/host-protocol/Images`). Streams in and out in
 * chunks, never held whole.
 */
import { type ObjectStore, Objm, setSha256Backend } from "@nats-io/obj"
import { Effect } from "effect"
import { BusError, Nats } from "./Nats.ts"
import { ensureReplicas } from "./Topology.ts"

export type { ObjectStore }

/** Opens (creating when absent) the object store `base` under the prefix. */
export const ensureObjectStore = Effect.fn("Objects.ensure")(function*(base: string) {
  const nats = yield* Nats
  // Node's own SHA-256 for the digest every put and get computes: the library's default is a
  // pure-JS one (for browsers), which was two thirds of an agent's CPU pulling an image
  // (bench/images.ts). Process-wide; a no-op once set.
  setSha256Backend("native")
  const store = yield* Effect.tryPromise({
    try: () => new Objm(nats.js).create(nats.name(base), { replicas: nats.replicas }),
    catch: (cause) => new BusError({ operation: `ensureObjectStore ${base}`, message: String(cause) })
  })
  yield* ensureReplicas(`OBJ_${nats.name(base)}`, nats.replicas)
  return store
})
