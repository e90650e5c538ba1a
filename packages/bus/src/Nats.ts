/**
 * The NATS connection of a process, with JetStream, its manager and KV, and the subject
 * namespace this process lives in.
 *
 * `prefix` namespaces every stream, subject and bucket name, so that several independent
 * platforms (tests sharing one server through `NATS_URL`) never see each other's messages.
 * Production runs with an empty prefix.
 */
import { jetstream, type JetStreamClient, type JetStreamManager, jetstreamManager } from "@nats-io/jetstream"
import { Kvm } from "@nats-io/kv"
import { connect, createInbox, headers, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node"
import { Context, Duration, Effect, Layer, Redacted, Schedule, Schema } from "effect"
import { NatsPrefix, NatsReplicas, type NatsSecurity, NatsSecurityConfig, NatsUrl } from "./Config.ts"
import { currentUnsafe, TRACEPARENT } from "./Trace.ts"

export class BusError extends Schema.TaggedError<BusError>()("BusError", {
  operation: Schema.String,
  message: Schema.String
}) {}

export interface NatsService {
  readonly connection: NatsConnection
  readonly js: JetStreamClient
  readonly jsm: JetStreamManager
  readonly kvm: Kvm
  readonly prefix: string
  /** `subject("evt", orgId, "sandbox.created")` → `evt.<orgId>.sandbox.created` under the prefix. */
  readonly subject: (...tokens: ReadonlyArray<string>) => string
  /** A stream, consumer or bucket name under the prefix. */
  readonly name: (base: string) => string
  /** How many replicas streams and buckets get when their declaration names none (`SVC_NATS_REPLICAS`). */
  readonly replicas: number
  /**
   * A JetStream publish, resolved with the stream's acknowledgement (or failed: no stream for
   * the subject, an error from the stream, no answer within `timeoutMs`, default 5 s). With
   * `msgId`, a second publish within the stream's duplicate window is acknowledged as
   * `duplicate` and not stored. Cheaper than `js.publish` on hot paths (see makeAckedPublisher).
   */
  readonly publishAcked: (
    subject: string,
    data: Uint8Array,
    options?: PublishOptions
  ) => Effect.Effect<PubAck, BusError>
}

export interface PublishOptions {
  readonly msgId?: string
  readonly timeoutMs?: number
  /** Further headers (e.g. `KV-Operation: DEL` for a KV delete). */
  readonly headers?: Readonly<Record<string, string>>
  /**
   * The `traceparent` header (Trace.ts): by default the current span's when spans are exported;
   * a string sends that one (the outbox relay sends the writer's), `null` none.
   */
  readonly traceparent?: string | null
}

export interface PubAck {
  readonly stream: string
  readonly seq: number
  readonly duplicate: boolean
}

/**
 * Acknowledged publishes over one wildcard inbox per connection: each publish gets a reply
 * subject `<inbox>.<token>`, replies are matched by token, and one timer expires the ones left
 * unanswered. The client's own `js.publish` makes a request that builds an Error (a stack
 * capture) as it completes, even when it succeeded, plus a timer per request: a measurable share
 * of the webhook fan-out's time, which publishes one job per delivery.
 */
const makeAckedPublisher = (connection: NatsConnection) => {
  const inbox = createInbox()
  const pending = new Map<
    string,
    {
      readonly resume: (effect: Effect.Effect<PubAck, BusError>) => void
      readonly deadline: number
      readonly subject: string
    }
  >()
  let next = 0
  const fail = (subject: string, message: string) =>
    Effect.fail(new BusError({ operation: `publish ${subject}`, message }))
  const subscription = connection.subscribe(`${inbox}.*`, {
    callback: (error, msg) => {
      if (error) return
      const token = msg.subject.slice(inbox.length + 1)
      const waiting = pending.get(token)
      if (waiting === undefined) return
      pending.delete(token)
      if (msg.headers?.code === 503) return waiting.resume(fail(waiting.subject, "no stream listens on this subject"))
      try {
        const ack = msg.json<{ stream?: string; seq?: number; duplicate?: boolean; error?: { description?: string } }>()
        if (ack.error !== undefined || typeof ack.seq !== "number") {
          return waiting.resume(fail(waiting.subject, ack.error?.description ?? "the stream refused the message"))
        }
        waiting.resume(Effect.succeed({ stream: ack.stream ?? "", seq: ack.seq, duplicate: ack.duplicate === true }))
      } catch {
        waiting.resume(fail(waiting.subject, "unreadable acknowledgement"))
      }
    }
  })
  const sweep = setInterval(() => {
    const now = Date.now()
    for (const [token, waiting] of pending) {
      if (waiting.deadline <= now) {
        pending.delete(token)
        waiting.resume(fail(waiting.subject, "no acknowledgement in time"))
      }
    }
  }, 50)
  sweep.unref()
  const publish = (
    subject: string,
    data: Uint8Array,
    options?: PublishOptions
  ) =>
    Effect.withFiber((fiber) => {
      // The sender's span, for the consumer to continue (nothing without an exporter).
      const traceparent = options?.traceparent === undefined ? currentUnsafe(fiber) : options.traceparent
      return publishWith(subject, data, options, traceparent ?? undefined)
    })
  const publishWith = (
    subject: string,
    data: Uint8Array,
    options: PublishOptions | undefined,
    traceparent: string | undefined
  ) =>
    Effect.callback<PubAck, BusError>((resume) => {
      const token = (next++).toString(36)
      pending.set(token, { resume, deadline: Date.now() + (options?.timeoutMs ?? 5_000), subject })
      try {
        let hdrs: MsgHdrs | undefined
        if (options?.msgId !== undefined || options?.headers !== undefined || traceparent !== undefined) {
          hdrs = headers()
          if (options?.msgId !== undefined) hdrs.set("Nats-Msg-Id", options.msgId)
          for (const [name, value] of Object.entries(options?.headers ?? {})) hdrs.set(name, value)
          if (traceparent !== undefined) hdrs.set(TRACEPARENT, traceparent)
        }
        connection.publish(subject, data, { reply: `${inbox}.${token}`, ...(hdrs ? { headers: hdrs } : {}) })
      } catch (cause) {
        pending.delete(token)
        resume(fail(subject, String(cause)))
      }
      // Interrupted: forget the reply (the message may still be stored).
      return Effect.sync(() => pending.delete(token))
    })
  const close = () => {
    clearInterval(sweep)
    subscription.unsubscribe()
    for (const waiting of pending.values()) waiting.resume(fail(waiting.subject, "connection closed"))
    pending.clear()
  }
  return { publish, close }
}

export interface NatsOptions {
  /** One URL, or a comma-separated list of a cluster's nodes. */
  readonly url: string
  readonly prefix?: string
  readonly name?: string
  /** Replicas of streams and buckets declared without a number (default 1). */
  readonly replicas?: number
  readonly security?: NatsSecurity
}

export class Nats extends Context.Service<Nats, NatsService>()("@svc/bus/Nats") {
  static readonly make = (options: NatsOptions) =>
    Effect.gen(function*() {
      const security = options.security ?? {}
      const connection = yield* Effect.acquireRelease(
        Effect.tryPromise({
          try: () =>
            connect({
              // A comma-separated list names the nodes of a cluster.
              servers: options.url.split(",").map((s) => s.trim()).filter((s) => s.length > 0),
              name: options.name ?? "svc",
              // Keep trying for ever: a NATS restart must not kill the process.
              maxReconnectAttempts: -1,
              reconnectTimeWait: 250,
              waitOnFirstConnect: false,
              // The client would otherwise build an Error (a stack capture) for every request
              // and publish it makes, in case it fails: measurable on the delivery hot path.
              noAsyncTraces: true,
              timeout: 5_000,
              ...(security.user !== undefined ? { user: security.user } : {}),
              ...(security.password !== undefined ? { pass: Redacted.value(security.password) } : {}),
              ...(security.tls !== undefined ? { tls: security.tls } : {})
            }),
          catch: (cause) => new BusError({ operation: "connect", message: String(cause) })
        }),
        (nc) => Effect.promise(() => nc.drain().catch(() => nc.close()))
      )
      // JetStream answers only once the server (or a cluster's meta leader) is ready: retry a while.
      const jsm = yield* Effect.tryPromise({
        try: () => jetstreamManager(connection),
        catch: (cause) => new BusError({ operation: "jetstreamManager", message: String(cause) })
      }).pipe(Effect.retry({ schedule: Schedule.spaced(Duration.millis(250)), times: 120 }))
      const js = jetstream(connection)
      const acked = yield* Effect.acquireRelease(
        Effect.sync(() => makeAckedPublisher(connection)),
        (p) => Effect.sync(p.close)
      )
      const kvm = new Kvm(js)
      const prefix = options.prefix ?? ""
      return Nats.of({
        connection,
        js,
        jsm,
        kvm,
        prefix,
        subject: (...tokens) => (prefix ? [prefix, ...tokens] : tokens).join("."),
        name: (base) => (prefix ? `${prefix}_${base}` : base),
        replicas: options.replicas ?? 1,
        publishAcked: acked.publish
      })
    })

  /** From `NATS_URL`, `SVC_NATS_PREFIX`, `SVC_NATS_REPLICAS`, `NATS_USER`/`NATS_PASSWORD` and `NATS_TLS_*`. */
  static readonly layer = Layer.effect(
    Nats,
    Effect.gen(function*() {
      const url = yield* NatsUrl
      const prefix = yield* NatsPrefix
      const replicas = yield* NatsReplicas
      const security = yield* NatsSecurityConfig
      return yield* Nats.make({ url, prefix, replicas, security })
    })
  )

  static readonly layerFrom = (options: NatsOptions) => Layer.effect(Nats, Nats.make(options))
}

/** Whether the bus answers a round trip within a deadline. */
export class BusHealth extends Context.Service<BusHealth, {
  readonly check: Effect.Effect<"up" | "down">
}>()("@svc/bus/BusHealth") {
  static readonly layer = Layer.effect(
    BusHealth,
    Effect.gen(function*() {
      const nats = yield* Nats
      const check = Effect.tryPromise(() => nats.connection.rtt()).pipe(
        Effect.timeout(Duration.seconds(2)),
        Effect.as("up" as const),
        Effect.catchCause(() => Effect.succeed("down" as const)),
        Effect.withSpan("BusHealth.check")
      )
      return BusHealth.of({ check })
    })
  )
}
