/**
 * What the control plane knows of the hosts: the `hosts` KV bucket that agents heartbeat into
 * (Protocol.ts), mirrored in memory by a KV watch so that placement and the data-plane proxy
 * never wait on a round trip. A host is live while its record is younger than
 * `HOST_DOWN_AFTER_MS`.
 *
 * The mirror: a watch of updates is opened first, then every current value is read, then the
 * updates are applied; per key only a higher KV revision replaces what is known, so the order
 * in which the snapshot and the updates arrive does not matter.
 */
import { BusError } from "@svc/bus/Nats"
import { ensureBucket, ensureStream } from "@svc/bus/Topology"
import { EGRESS_BUCKET_SPEC } from "@svc/host-protocol/Egress"
import { AGENT_STREAM_SPEC, HOST_DOWN_AFTER_MS, HostRecord, HOSTS_BUCKET_SPEC } from "@svc/host-protocol/Protocol"
import { Clock, Context, Deferred, Duration, Effect, Layer, Option, Schedule, Schema } from "effect"

export { HostRecord } from "@svc/host-protocol/Protocol"

/** Whether a host's record is fresh at `now` (ms). */
export const isLive = (host: HostRecord, now: number, downAfterMs = HOST_DOWN_AFTER_MS): boolean =>
  now - host.heartbeatAt <= downAfterMs

/** Creates the AGENT stream if needed (the outbox relay cannot publish commands before). */
export const ensureAgentStream = Effect.fn("Hosts.ensureAgentStream")(function*() {
  return yield* ensureStream(AGENT_STREAM_SPEC)
})

const decodeRecord = Schema.decodeUnknownOption(Schema.fromJsonString(HostRecord))
const decoder = new TextDecoder()

interface Known {
  readonly revision: number
  /** null: the key was deleted or holds something that is not a host record. */
  readonly record: HostRecord | null
}

export class Hosts extends Context.Service<Hosts, {
  /** Every host with a record, fresh or not. */
  readonly all: Effect.Effect<ReadonlyArray<HostRecord>>
  /** Hosts whose heartbeat is fresh. */
  readonly live: Effect.Effect<ReadonlyArray<HostRecord>>
  /** One host's record (read through to the bucket when the mirror does not know it yet). */
  readonly get: (hostId: string) => Effect.Effect<Option.Option<HostRecord>>
  /** Whether the host's heartbeat is fresh. */
  readonly isLive: (hostId: string) => Effect.Effect<boolean>
  /** Whether the mirror holds the bucket's contents (false until the first full read). */
  readonly synced: Effect.Effect<boolean>
  /** Reads the whole bucket now (a host that just registered may not have reached the watch yet). */
  readonly refresh: Effect.Effect<void>
}>()("@svc/hosts/Hosts") {
  static readonly make = Effect.gen(function*() {
    const kv = yield* ensureBucket(HOSTS_BUCKET_SPEC)
    // The hosts' other bucket: the sandboxes' egress entries, which the outbox relay puts into
    // (a put into a missing bucket would hold the relay up until it exists).
    yield* ensureBucket(EGRESS_BUCKET_SPEC)
    const known = new Map<string, Known>()
    const ready = yield* Deferred.make<void>()

    const apply = (key: string, revision: number, operation: string, value: Uint8Array) => {
      const current = known.get(key)
      if (current !== undefined && current.revision >= revision) return
      const record = operation === "PUT" ? Option.getOrNull(decodeRecord(decoder.decode(value))) : null
      known.set(key, { revision, record })
    }

    const snapshot = Effect.tryPromise({
      try: async () => {
        for await (const key of await kv.keys()) {
          const entry = await kv.get(key)
          if (entry !== null) apply(entry.key, entry.revision, entry.operation, entry.value)
        }
      },
      catch: (cause) => new BusError({ operation: "read hosts", message: String(cause) })
    })

    const mirror = Effect.gen(function*() {
      const updates = yield* Effect.acquireRelease(
        Effect.tryPromise({
          try: () => kv.watch({ include: "updates" }),
          catch: (cause) => new BusError({ operation: "watch hosts", message: String(cause) })
        }),
        (w) => Effect.sync(() => w.stop())
      )
      yield* snapshot
      yield* Deferred.succeed(ready, undefined)
      yield* Effect.tryPromise({
        try: async () => {
          for await (const e of updates) apply(e.key, e.revision, e.operation, e.value)
        },
        catch: (cause) => new BusError({ operation: "watch hosts", message: String(cause) })
      })
      return yield* new BusError({ operation: "watch hosts", message: "watch ended" })
    }).pipe(
      Effect.scoped,
      Effect.tapError((e) => Effect.logWarning("hosts: watch lost, restarting", { error: e.message })),
      Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(100)), Schedule.spaced(Duration.seconds(5))]))
    )
    yield* Effect.forkScoped(mirror)
    // The first snapshot, or give up waiting after a while (callers then see what is known).
    yield* Effect.timeoutOption(Deferred.await(ready), Duration.seconds(5))

    const records = () => {
      const out: Array<HostRecord> = []
      for (const k of known.values()) if (k.record !== null) out.push(k.record)
      return out
    }

    const get = (hostId: string) =>
      Effect.gen(function*() {
        const k = known.get(hostId)
        if (k !== undefined) return Option.fromNullishOr(k.record)
        const entry = yield* Effect.tryPromise(() => kv.get(hostId)).pipe(Effect.orElseSucceed(() => null))
        if (entry === null) return Option.none<HostRecord>()
        apply(entry.key, entry.revision, entry.operation, entry.value)
        return Option.fromNullishOr(known.get(hostId)?.record)
      })

    return Hosts.of({
      all: Effect.sync(records),
      live: Effect.map(Clock.currentTimeMillis, (now) => records().filter((h) => isLive(h, now))),
      get,
      isLive: (hostId) =>
        Effect.gen(function*() {
          const host = yield* get(hostId)
          const now = yield* Clock.currentTimeMillis
          return Option.isSome(host) && isLive(host.value, now)
        }),
      synced: Deferred.isDone(ready),
      // Bounded: a caller waits at most this long for the bucket before using what it knows.
      refresh: Effect.ignore(Effect.timeout(snapshot, Duration.seconds(2)))
    })
  })

  /** Needs `Nats` (via the topology helpers); the mirror runs for the layer's lifetime. */
  static readonly layer = Layer.effect(Hosts, Hosts.make)
}
