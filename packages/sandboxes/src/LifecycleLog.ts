/**
 * The lifecycle lines of a sandbox's log (docs/architecture.md#sandbox-logs-and-metrics), written
 * from its events: a durable consumer of `EVENTS` (`evt.*.sandbox.>`, shared by every runtime
 * process) turns `sandbox.created` and each `sandbox.state_updated` into a line on
 * `sbxlog.<id>.ctl` (msgID from the event's: a repeat is dropped), and a `sandbox.deleted`
 * into the purge of the sandbox's logs and metrics. A `stopped` line carries the event's
 * `reason` when it has one.
 */
import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream"
import { consumeScoped } from "@svc/bus/Consume"
import { BusError, Nats } from "@svc/bus/Nats"
import { ensureConsumer } from "@svc/bus/Topology"
import { SandboxState } from "@svc/domain/Sandbox"
import * as Events from "@svc/events/Streams"
import {
  controlLogSubject,
  ensureStreams,
  type LifecycleLine,
  lifecycleText,
  publishLines,
  purgeSandbox
} from "@svc/host-protocol/SandboxTelemetry"
import { Duration, Effect, Layer, Option, Schedule, Schema, Stream } from "effect"

export const LIFECYCLE_LOG_CONSUMER = "sandbox_lifecycle_log"

const Reason = Schema.optionalKey(Schema.NullOr(Schema.String))

/** The events read, leniently: only the fields a line needs. */
const SandboxEvent = Schema.fromJsonString(Schema.Union([
  Schema.Struct({
    event: Schema.Literal("sandbox.created"),
    ts: Schema.String,
    data: Schema.Struct({
      sandbox_id: Schema.String,
      host_id: Schema.String,
      template: Schema.String,
      cpu: Schema.Number,
      ram_mb: Schema.Number,
      disk_gb: Schema.Number,
      via: Schema.String
    })
  }),
  Schema.Struct({
    event: Schema.Literal("sandbox.state_updated"),
    ts: Schema.String,
    data: Schema.Struct({ sandbox_id: Schema.String, state: SandboxState, reason: Reason })
  }),
  Schema.Struct({
    event: Schema.Literal("sandbox.deleted"),
    ts: Schema.String,
    data: Schema.Struct({ sandbox_id: Schema.String })
  })
]))
type SandboxEvent = typeof SandboxEvent.Type
const decodeEvent = Schema.decodeUnknownOption(SandboxEvent)

/** The line an event makes (undefined: none). Pure. */
export const lineOf = (event: SandboxEvent): LifecycleLine | undefined => {
  switch (event.event) {
    case "sandbox.created": {
      const d = event.data
      return {
        _tag: "created",
        detail: `host ${d.host_id}, template ${d.template}, ${d.cpu} cpu, ${d.ram_mb} MiB, ${d.disk_gb} GiB (${d.via})`
      }
    }
    case "sandbox.state_updated": {
      const reason = event.data.reason ?? null
      switch (event.data.state) {
        case "starting":
          return { _tag: "starting" }
        case "running":
          return { _tag: "started" }
        case "stopping":
          return { _tag: "stopping", reason }
        case "stopped":
          return { _tag: "stopped", reason }
        case "error":
          return { _tag: "error", reason }
        case "deleting":
          return { _tag: "deleting", reason }
        default:
          return undefined
      }
    }
    case "sandbox.deleted":
      return undefined
  }
}

/** Writes lifecycle lines and purges deleted sandboxes' logs and metrics, for the life of the scope. Needs `Nats`. */
export const runLifecycleLog = Effect.gen(function*() {
  const nats = yield* Nats
  const stream = yield* Events.ensure()
  yield* ensureStreams()
  yield* ensureConsumer(Events.EVENTS.name, {
    durable_name: LIFECYCLE_LOG_CONSUMER,
    filter_subject: "evt.*.sandbox.>",
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.New,
    ack_wait: 30_000 * 1_000_000,
    max_ack_pending: 256
  })

  const handle = (msg: JsMsg) =>
    Effect.gen(function*() {
      const event = decodeEvent(new TextDecoder().decode(msg.data))
      if (Option.isNone(event)) {
        msg.ack()
        return
      }
      const sandboxId = event.value.data.sandbox_id
      if (event.value.event === "sandbox.deleted") {
        yield* purgeSandbox(sandboxId)
      } else {
        const line = lineOf(event.value)
        if (line !== undefined) {
          const id = msg.headers?.get("Nats-Msg-Id") || `seq:${msg.seq}`
          yield* publishLines(
            controlLogSubject(sandboxId),
            [{ ts: event.value.ts, source: "lifecycle", text: lifecycleText(line) }],
            () => `lc:${id}`
          )
        }
      }
      msg.ack()
    }).pipe(
      Effect.catchCause((cause) =>
        Effect.andThen(
          Effect.logWarning("sandboxes: a lifecycle line was not written, it comes back", { cause: String(cause) }),
          Effect.sync(() => msg.nak(1_000))
        )
      )
    )

  return yield* Effect.gen(function*() {
    const consumer = yield* Effect.tryPromise({
      try: () => nats.js.consumers.get(stream, nats.name(LIFECYCLE_LOG_CONSUMER)),
      catch: (cause) => new BusError({ operation: `consumer ${LIFECYCLE_LOG_CONSUMER}`, message: String(cause) })
    })
    const messages = yield* consumeScoped(consumer, `consume ${LIFECYCLE_LOG_CONSUMER}`, { max_messages: 64 })
    // In order: one sandbox's lines keep the order of its events.
    yield* Stream.fromAsyncIterable(
      messages,
      (cause) => new BusError({ operation: "consume sandbox events", message: String(cause) })
    ).pipe(Stream.mapEffect(handle), Stream.runDrain)
  }).pipe(
    Effect.scoped,
    Effect.tapCause((cause) =>
      Effect.logWarning("sandboxes: lifecycle log stopped, restarting", { cause: String(cause) })
    ),
    Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(200)), Schedule.spaced(Duration.seconds(5))])),
    Effect.ignore,
    Effect.forever
  )
})

/** The lifecycle log as a layer of the runtime role. */
export const LifecycleLog = Layer.effectDiscard(Effect.forkScoped(runLifecycleLog))
