/**
 * What wakes the app controllers besides their own operations' outcomes:
 * - the replicas' sandbox events: a durable consumer of `EVENTS` (`evt.*.sandbox.state_updated`,
 *   shared by every runtime process) sends each change of a sandbox that is an app's replica
 *   (`metadata.app_id`) to that app's actor at once (msgID from the event's: a repeat is dropped);
 * - the reconcile round: every `SVC_APP_RECONCILE_INTERVAL`, each runtime process sends a `Tick`
 *   to every app (msgID `tick:<appId>:<round>`: with several runtimes, one per round arrives). A
 *   tick observes the replicas (a `cmd` that exited, anything an event missed) and ends backoffs.
 */
import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream"
import * as Actors from "@svc/actors/Actors"
import { consumeScoped } from "@svc/bus/Consume"
import { BusError, Nats } from "@svc/bus/Nats"
import { ensureConsumer } from "@svc/bus/Topology"
import { StopReason } from "@svc/domain/Lifecycle"
import { SandboxState } from "@svc/domain/Sandbox"
import * as Events from "@svc/events/Streams"
import { Clock, Duration, Effect, Option, Schedule, Schema, Stream } from "effect"
import { AppActor } from "../AppActor.ts"
import * as Store from "./Store.ts"

export const APP_EVENTS_CONSUMER = "app_controller_events"

const SandboxEvent = Schema.fromJsonString(Schema.Struct({
  data: Schema.Struct({
    sandbox_id: Schema.String,
    state: SandboxState,
    reason: Schema.optionalKey(Schema.NullOr(StopReason))
  })
}))
const decodeEvent = Schema.decodeUnknownEffect(SandboxEvent)

/** Sends every replica's sandbox change to its app, for the life of the scope. Needs `Nats`, `SqlClient`. */
export const runEventWatch = Effect.gen(function*() {
  const nats = yield* Nats
  const stream = yield* Events.ensure()
  yield* ensureConsumer(Events.EVENTS.name, {
    durable_name: APP_EVENTS_CONSUMER,
    filter_subject: "evt.*.sandbox.state_updated",
    ack_policy: AckPolicy.Explicit,
    // Apps older than this consumer are reconciled by their ticks.
    deliver_policy: DeliverPolicy.New,
    ack_wait: 30_000 * 1_000_000,
    max_ack_pending: 256
  })

  const handle = (msg: JsMsg) =>
    Effect.gen(function*() {
      const event = yield* decodeEvent(new TextDecoder().decode(msg.data)).pipe(Effect.option)
      if (Option.isNone(event)) {
        msg.term()
        return
      }
      const { reason, sandbox_id: sandboxId, state } = event.value.data
      const app = yield* Store.appOfSandbox(sandboxId)
      if (Option.isSome(app)) {
        const id = msg.headers?.get("Nats-Msg-Id") || `seq:${msg.seq}`
        yield* Actors.send(
          AppActor,
          app.value,
          { _tag: "SandboxChanged", sandboxId, state, ...(reason !== undefined ? { reason } : {}) },
          { msgID: `evt:${id}` }
        )
      }
      msg.ack()
    }).pipe(
      Effect.catchCause((cause) =>
        Effect.andThen(
          Effect.logWarning("apps: a sandbox event was not passed on, it comes back", { cause: String(cause) }),
          Effect.sync(() => msg.nak(1_000))
        )
      )
    )

  return yield* Effect.gen(function*() {
    const consumer = yield* Effect.tryPromise({
      try: () => nats.js.consumers.get(stream, nats.name(APP_EVENTS_CONSUMER)),
      catch: (cause) => new BusError({ operation: `consumer ${APP_EVENTS_CONSUMER}`, message: String(cause) })
    })
    const messages = yield* consumeScoped(consumer, `consume ${APP_EVENTS_CONSUMER}`, { max_messages: 64 })
    yield* Stream.fromAsyncIterable(
      messages,
      (cause) => new BusError({ operation: "consume sandbox events", message: String(cause) })
    ).pipe(Stream.mapEffect(handle, { concurrency: 4, unordered: true }), Stream.runDrain)
  }).pipe(
    Effect.scoped,
    Effect.tapCause((cause) => Effect.logWarning("apps: event watch stopped, restarting", { cause: String(cause) })),
    Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(200)), Schedule.spaced(Duration.seconds(5))])),
    Effect.ignore,
    Effect.forever
  )
})

/** Ticks every app each `interval`, for the life of the scope. Needs `Nats`, `SqlClient`. */
export const runTicker = (interval: Duration.Duration) =>
  Effect.gen(function*() {
    const ms = Duration.toMillis(interval)
    const round = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const ids = yield* Store.liveIds
      yield* Effect.forEach(
        ids,
        (id) => Actors.send(AppActor, id, { _tag: "Tick" }, { msgID: `tick:${id}:${Math.floor(now / ms)}` }),
        { concurrency: 8, discard: true }
      )
    }).pipe(
      Effect.catchCause((cause) => Effect.logWarning("apps: a reconcile round failed", { cause: String(cause) }))
    )
    yield* Effect.repeat(round, Schedule.spaced(interval))
  })
