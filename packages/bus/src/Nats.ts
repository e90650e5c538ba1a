/**
 * The NATS connection of a process, with JetStream, its manager and KV, and the subject
 * namespace this process lives in.
 *
 * `prefix` namespaces every stream, subject and bucket name, so that several independent
 * platforms (tests sharing one server through `NATS_URL`) never see each other's messages.
 * Production runs with an empty prefix.
 */
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream"
import { Kvm } from "@nats-io/kv"
import { connect, type NatsConnection } from "@nats-io/transport-node"
import { Config, Context, Duration, Effect, Layer, Schedule, Schema } from "effect"

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
}

export const NatsUrl = Config.String("NATS_URL").pipe(Config.withDefault("nats://127.0.0.1:4222"))
export const NatsPrefix = Config.String("SVC_NATS_PREFIX").pipe(Config.withDefault(""))

export class Nats extends Context.Service<Nats, NatsService>()("@svc/bus/Nats") {
  static readonly make = (options: { readonly url: string; readonly prefix?: string; readonly name?: string }) =>
    Effect.gen(function*() {
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
              timeout: 5_000
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
      const kvm = new Kvm(js)
      const prefix = options.prefix ?? ""
      return Nats.of({
        connection,
        js,
        jsm,
        kvm,
        prefix,
        subject: (...tokens) => (prefix ? [prefix, ...tokens] : tokens).join("."),
        name: (base) => (prefix ? `${prefix}_${base}` : base)
      })
    })

  /** From `NATS_URL` and `SVC_NATS_PREFIX`. */
  static readonly layer = Layer.effect(
    Nats,
    Effect.gen(function*() {
      const url = yield* NatsUrl
      const prefix = yield* NatsPrefix
      return yield* Nats.make({ url, prefix })
    })
  )

  static readonly layerFrom = (options: { readonly url: string; readonly prefix?: string; readonly name?: string }) =>
    Layer.effect(Nats, Nats.make(options))
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
