/**
 * Webhook fan-out: consumes the `EVENTS` stream (durable consumer, any number of processes),
 * matches each event to its org's enabled webhooks (exact name or `*`), writes one delivery per
 * match and publishes its job.
 *
 * Never lost, never doubled: deliveries are unique per (webhook, event message id), so an event
 * seen again (a restart before the ack, a redelivery) adds no row; its jobs are published again
 * with the same msg id (dropped by the stream within its duplicate window, and harmless after
 * it: a dispatcher claims each attempt number once). The event is acked only after its
 * deliveries are committed and their jobs acknowledged by the stream.
 *
 * The body of a delivery is the event message's bytes, exactly as the producer wrote them.
 */
import type { JsMsg } from "@nats-io/jetstream"
import { AckPolicy, DeliverPolicy } from "@nats-io/jetstream"
import { consumeScoped } from "@svc/bus/Consume"
import { BusError, Nats } from "@svc/bus/Nats"
import { ensureConsumer } from "@svc/bus/Topology"
import * as Trace from "@svc/bus/Trace"
import * as Rows from "@svc/db/Rows"
import { EVENT_NAMES, type EventName } from "@svc/domain/Events"
import { DeliveryId } from "@svc/domain/Ids"
import * as Streams from "@svc/events/Streams"
import { type Cause, Context, Duration, Effect, Exit, Layer, Queue, Ref, Schedule, Schema, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { ensureDeliveryStream, publishJob, webhookVersionSql } from "./Jobs.ts"

export const FANOUT_CONSUMER = "webhook_fanout"

export interface FanOutOptions {
  /** Durable consumer name on EVENTS (relative to the prefix). Default `webhook_fanout`. */
  readonly consumerName?: string
  /** Events per database round trip. Default 256. */
  readonly batchSize?: number
  /** How long an event handed to a fan-out that died stays invisible. Default 30 s. */
  readonly ackWaitMs?: number
}

const Envelope = Schema.Struct({
  event: Schema.String,
  org_id: Schema.String,
  ts: Schema.String,
  data: Schema.Record(Schema.String, Schema.Unknown)
})
const decodeEnvelope = Schema.decodeUnknownExit(Schema.fromJsonString(Envelope))

/** What writing a batch's deliveries returns: each delivery and the webhook version it matched. */
const deliveryRows = Rows.decoder(
  "FanOut.processBatch",
  Schema.Struct({
    id: DeliveryId,
    webhook_id: Schema.String,
    round: Schema.Int,
    event_msg_id: Schema.String,
    webhook_version: Rows.Int8
  })
)
const textDecoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true })

const deliverable = new Set<string>(EVENT_NAMES.filter((name) => name !== "ping"))

interface ParsedEvent {
  readonly msg: JsMsg
  readonly orgId: string
  readonly event: EventName
  readonly msgId: string
  readonly body: string
}

/** Reads one EVENTS message; null (and why) when it cannot be delivered to anyone. */
export const parseEventMessage = (
  subjectPrefix: string,
  msg: Pick<JsMsg, "subject" | "data" | "headers" | "seq">
): { readonly orgId: string; readonly event: EventName; readonly msgId: string; readonly body: string } | string => {
  if (!msg.subject.startsWith(subjectPrefix)) return "subject outside evt.>"
  const rest = msg.subject.slice(subjectPrefix.length)
  const dot = rest.indexOf(".")
  if (dot <= 0) return "subject without an event name"
  const orgId = rest.slice(0, dot)
  const event = rest.slice(dot + 1)
  // `ping` is only ever sent by the test operation, to one webhook.
  if (!deliverable.has(event)) return `not a webhook event: ${event.slice(0, 60)}`
  let body: string
  try {
    body = textDecoder.decode(msg.data)
  } catch {
    return "body is not UTF-8"
  }
  const envelope = decodeEnvelope(body)
  if (Exit.isFailure(envelope)) return "body is not an event envelope"
  if (envelope.value.event !== event || envelope.value.org_id !== orgId) return "envelope does not match its subject"
  const header = msg.headers?.get("Nats-Msg-Id")
  const msgId = header !== undefined && header !== "" ? header : `seq:${msg.seq}`
  return { orgId, event: event as EventName, msgId, body }
}

export class FanOut extends Context.Service<FanOut, {
  /** Events handled and deliveries written by this process. */
  readonly stats: Effect.Effect<{ readonly events: number; readonly deliveries: number }>
}>()("@svc/webhooks/Delivery/FanOut") {
  static readonly make = Effect.fn("FanOut.make")(function*(options: FanOutOptions = {}) {
    const nats = yield* Nats
    const sql = yield* SqlClient.SqlClient
    const batchSize = options.batchSize ?? 256
    const eventsStream = yield* Streams.ensure()
    yield* ensureDeliveryStream
    const { consumer: consumerName } = yield* ensureConsumer(Streams.EVENTS.name, {
      durable_name: options.consumerName ?? FANOUT_CONSUMER,
      filter_subject: "evt.>",
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: (options.ackWaitMs ?? 30_000) * 1_000_000,
      max_ack_pending: batchSize * 8
    })
    const subjectPrefix = nats.subject("evt") + "."
    const counters = yield* Ref.make({ events: 0, deliveries: 0 })

    // A trace of its own: a batch holds events of many traces (each delivery span continues its event's).
    const processBatch = Effect.fn("FanOut.processBatch", { root: true })(function*(msgs: ReadonlyArray<JsMsg>) {
      const events: Array<ParsedEvent> = []
      for (const msg of msgs) {
        const parsed = parseEventMessage(subjectPrefix, msg)
        if (typeof parsed === "string") {
          yield* Effect.logWarning("webhook fan-out: skipping an event", { subject: msg.subject, reason: parsed })
          msg.term()
        } else {
          events.push({ msg, ...parsed })
        }
      }
      if (events.length === 0) return
      // The same event twice in one batch (a redelivery overtaking its original) is written once.
      const unique = [...new Map(events.map((e) => [e.msgId, e])).values()]
      const orgs = [...new Set(unique.map((e) => e.orgId))]
      // One statement: match each event to its org's enabled webhooks (exact name or `*`, the
      // rule of Events.matchesFilter) and write the deliveries. A row that exists already (the
      // event was seen before) is returned too, so its job goes out again.
      const rows = yield* deliveryRows(sql`
        WITH e AS (
          SELECT * FROM unnest(${unique.map((e) => e.orgId)}::text[], ${unique.map((e) => e.event)}::text[],
                               ${unique.map((e) => e.msgId)}::text[], ${unique.map((e) => e.body)}::text[])
            AS t(org_id, event, event_msg_id, body)
        ), ins AS (
          INSERT INTO webhook_deliveries (id, webhook_id, org_id, event, event_msg_id, body, status)
          SELECT svc_webhook_delivery_id(), w.id, e.org_id, e.event, e.event_msg_id, e.body, 'pending'
          FROM e JOIN webhooks w ON w.org_id = e.org_id
          WHERE w.org_id = ANY(${orgs}::text[]) AND w.deleted_at IS NULL AND w.enabled AND w.events && ARRAY['*', e.event]
          ON CONFLICT (webhook_id, event_msg_id) DO UPDATE SET round = webhook_deliveries.round
          RETURNING id, webhook_id, round, event_msg_id
        )
        -- The webhook as this statement saw it (the same snapshot as the match).
        SELECT ins.*, ${webhookVersionSql(sql, "w.updated_at")} AS webhook_version
        FROM ins JOIN webhooks w ON w.id = ins.webhook_id`)
      // The job carries the event and its exact bytes, and the version of the webhook it was
      // matched against: the first attempt needs no read (DeliveryStates.firstAttemptFastPath).
      const byMsgId = new Map(unique.map((e) => [e.msgId, e]))
      yield* Effect.forEach(rows, (row) => {
        const event = byMsgId.get(row.event_msg_id)!
        return publishJob(row.webhook_id, {
          delivery_id: row.id,
          round: row.round,
          event: event.event,
          body: event.body,
          webhook_version: Number(row.webhook_version)
        }).pipe(
          // Continues the event's trace (its `traceparent` header) when spans are exported; the
          // job carries this span on to the dispatcher.
          Trace.continueMessage("WebhookFanOut.deliver", event.msg.headers, {
            attributes: { "webhook.id": row.webhook_id, "delivery.id": row.id, event: event.event }
          })
        )
      }, {
        concurrency: 64,
        discard: true
      })
      for (const e of events) e.msg.ack()
      yield* Ref.update(counters, (c) => ({ events: c.events + events.length, deliveries: c.deliveries + rows.length }))
    })

    const run = Effect.gen(function*() {
      const consumer = yield* Effect.tryPromise({
        try: () => nats.js.consumers.get(eventsStream, consumerName),
        catch: (cause) => new BusError({ operation: `consumer ${consumerName}`, message: String(cause) })
      })
      const messages = yield* consumeScoped(consumer, `consume ${consumerName}`, { max_messages: batchSize * 2 })
      const inbox = yield* Queue.bounded<JsMsg, Cause.Done>(batchSize * 2)
      yield* Effect.forkScoped(
        Stream.fromAsyncIterable(
          messages,
          (cause) => new BusError({ operation: "consume events", message: String(cause) })
        ).pipe(
          Stream.runForEach((msg) => Queue.offer(inbox, msg)),
          Effect.ensuring(Queue.end(inbox))
        )
      )
      for (;;) {
        const batch = yield* Queue.takeBetween(inbox, 1, batchSize)
        yield* processBatch(batch).pipe(
          Effect.catchCause((cause) =>
            Effect.andThen(
              Effect.logWarning("webhook fan-out: batch failed, events will come back", { cause: String(cause) }),
              Effect.sync(() => {
                // Not acked: back in a second rather than after ack_wait.
                for (const msg of batch) msg.nak(1_000)
              })
            )
          )
        )
      }
    }).pipe(
      Effect.scoped,
      Effect.tapCause((cause) =>
        Effect.logWarning("webhook fan-out: consumer stopped, restarting", { cause: String(cause) })
      ),
      Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(200)), Schedule.spaced(Duration.seconds(5))])),
      Effect.ignore
    )
    yield* Effect.forkScoped(run)
    return FanOut.of({ stats: Ref.get(counters) })
  })

  /** The fan-out role: needs Nats and SqlClient. */
  static readonly layer = Layer.effect(FanOut)(FanOut.make())

  static readonly layerWith = (options: FanOutOptions) => Layer.effect(FanOut)(FanOut.make(options))
}
