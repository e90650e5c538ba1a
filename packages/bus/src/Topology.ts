/**
 * Streams, consumers and KV buckets declared in code and created idempotently at start-up.
 * Each package declares what it needs (see `Streams.ts` and the packages' own topologies);
 * `ensure` makes the server match: created when absent, updated when the declaration changed.
 */
import { type ConsumerConfig, DiscardPolicy, RetentionPolicy, StorageType, type StreamConfig } from "@nats-io/jetstream"
import { Duration, Effect, Schedule } from "effect"
import { BusError, Nats } from "./Nats.ts"

export interface StreamSpec {
  /** Base name; the process prefix is added. */
  readonly name: string
  /** Subject patterns relative to the prefix, e.g. `evt.>`. */
  readonly subjects: ReadonlyArray<string>
  readonly retention?: "limits" | "workqueue" | "interest"
  readonly maxAgeMs?: number
  /** Window in which a repeated `Nats-Msg-Id` is dropped as a duplicate. */
  readonly duplicateWindowMs?: number
  readonly replicas?: number
  /** Messages kept per subject (the oldest go first); unlimited when absent. */
  readonly maxMsgsPerSubject?: number
  /** Bytes the whole stream keeps (the oldest messages go first); unlimited when absent. */
  readonly maxBytes?: number
  /** The largest message the stream takes; the server's limit when absent. */
  readonly maxMsgSize?: number
}

export interface BucketSpec {
  readonly name: string
  /** Default: the process's `SVC_NATS_REPLICAS`. */
  readonly replicas?: number
  readonly history?: number
  readonly ttlMs?: number
}

const nanos = (ms: number) => ms * 1_000_000

/**
 * What a cluster answers while it cannot yet (a fresh cluster electing its meta leader, a node
 * lost and its streams' leaders moving) or two processes declaring the same thing at once: the
 * declaration is tried again for a minute rather than failing the process's start.
 */
const TRANSIENT =
  /timeout|no responders|jetstream (is )?not enabled|temporarily unavailable|insufficient resources|no suitable peers|leader|offline|already in use|503|connection/i

const retryTransient = <A>(nats: Nats["Service"], effect: Effect.Effect<A, BusError>) =>
  Effect.retry(effect, {
    schedule: Schedule.spaced(Duration.millis(500)),
    times: 120,
    // A connection this process closed never comes back: that is not a cluster catching up.
    while: (e) => !nats.connection.isClosed() && TRANSIENT.test(e.message)
  })

export const ensureStream = Effect.fn("Topology.ensureStream")(function*(spec: StreamSpec) {
  const nats = yield* Nats
  const maxAgeMs = spec.maxAgeMs ?? 7 * 24 * 3600_000
  const config: Partial<StreamConfig> & { name: string } = {
    name: nats.name(spec.name),
    subjects: spec.subjects.map((s) => nats.subject(s)),
    retention: spec.retention === "workqueue"
      ? RetentionPolicy.Workqueue
      : spec.retention === "interest"
      ? RetentionPolicy.Interest
      : RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(maxAgeMs),
    // The server refuses a duplicate window longer than the retention.
    duplicate_window: nanos(Math.min(spec.duplicateWindowMs ?? 2 * 60_000, maxAgeMs)),
    num_replicas: spec.replicas ?? nats.replicas,
    ...(spec.maxMsgsPerSubject !== undefined ? { max_msgs_per_subject: spec.maxMsgsPerSubject } : {}),
    ...(spec.maxBytes !== undefined ? { max_bytes: spec.maxBytes } : {}),
    ...(spec.maxMsgSize !== undefined ? { max_msg_size: spec.maxMsgSize } : {})
  }
  yield* retryTransient(
    nats,
    Effect.tryPromise({
      try: async () => {
        try {
          await nats.jsm.streams.info(config.name)
          await nats.jsm.streams.update(config.name, config)
        } catch (e) {
          if (!String(e).includes("not found")) throw e
          await nats.jsm.streams.add(config)
        }
      },
      catch: (cause) => new BusError({ operation: `ensureStream ${config.name}`, message: String(cause) })
    })
  )
  return config.name
})

/** A durable consumer on a stream (names relative to the prefix); idempotent. */
export const ensureConsumer = Effect.fn("Topology.ensureConsumer")(function*(
  stream: string,
  config: Partial<ConsumerConfig> & { durable_name: string }
) {
  const nats = yield* Nats
  const streamName = nats.name(stream)
  const full: Partial<ConsumerConfig> & { durable_name: string } = {
    ...config,
    durable_name: nats.name(config.durable_name),
    ...(config.filter_subject !== undefined ? { filter_subject: nats.subject(config.filter_subject) } : {})
  }
  yield* retryTransient(
    nats,
    Effect.tryPromise({
      try: async () => {
        try {
          await nats.jsm.consumers.info(streamName, full.durable_name)
          await nats.jsm.consumers.update(streamName, full.durable_name, full)
        } catch (e) {
          if (!String(e).includes("not found")) throw e
          await nats.jsm.consumers.add(streamName, full)
        }
      },
      catch: (cause) => new BusError({ operation: `ensureConsumer ${full.durable_name}`, message: String(cause) })
    })
  )
  return { stream: streamName, consumer: full.durable_name }
})

/**
 * The stream `stream` with `replicas` copies: the KV and object store clients create their
 * streams only when absent, so a platform moved from one node to a cluster (SVC_NATS_REPLICAS
 * 1 → 3) is re-replicated here.
 */
export const ensureReplicas = Effect.fn("Topology.ensureReplicas")(function*(stream: string, replicas: number) {
  const nats = yield* Nats
  yield* retryTransient(
    nats,
    Effect.tryPromise({
      try: async () => {
        const info = await nats.jsm.streams.info(stream)
        if (info.config.num_replicas !== replicas) {
          await nats.jsm.streams.update(stream, { ...info.config, num_replicas: replicas })
        }
      },
      catch: (cause) => new BusError({ operation: `ensureReplicas ${stream}`, message: String(cause) })
    })
  )
})

export const ensureBucket = Effect.fn("Topology.ensureBucket")(function*(spec: BucketSpec) {
  const nats = yield* Nats
  const replicas = spec.replicas ?? nats.replicas
  const kv = yield* retryTransient(
    nats,
    Effect.tryPromise({
      try: () =>
        nats.kvm.create(nats.name(spec.name), {
          history: spec.history ?? 1,
          replicas,
          ...(spec.ttlMs !== undefined ? { ttl: spec.ttlMs } : {})
        }),
      catch: (cause) => new BusError({ operation: `ensureBucket ${spec.name}`, message: String(cause) })
    })
  )
  yield* ensureReplicas(`KV_${nats.name(spec.name)}`, replicas)
  return kv
})
