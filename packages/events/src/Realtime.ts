/**
 * An org's events as they happen, for `GET /v1/events` (docs/contract.md#realtime-events): an
 * ordered consumer of the `EVENTS` stream filtered to `evt.<orgId>.>`, from the next event or
 * from just after a given stream sequence. The sequence is each event's `id`: unique, growing,
 * so a client that reconnects with `Last-Event-ID` misses nothing that is still retained (the
 * stream keeps 7 days) and sees nothing twice. A follow that fails forgets that its connection
 * ensured the stream (`Streams.forget`), so a stream removed since is made again by the client's
 * reconnection.
 */
import { DeliverPolicy } from "@nats-io/jetstream"
import { consumeScoped } from "@svc/bus/Consume"
import { BusError, Nats } from "@svc/bus/Nats"
import type { EventName } from "@svc/domain/Events"
import { Effect, Option, Schema, Stream } from "effect"
import * as Streams from "./Streams.ts"

/** One event as the stream holds it: its sequence, name and envelope (the JSON as published). */
export interface StreamedEvent {
  readonly seq: number
  readonly name: EventName
  /** The envelope's JSON text, as published. */
  readonly json: string
  readonly data: Record<string, unknown>
}

const Envelope = Schema.Struct({
  event: Schema.String,
  org_id: Schema.String,
  data: Schema.Record(Schema.String, Schema.Unknown)
})
const decodeEnvelope = Schema.decodeUnknownOption(Schema.fromJsonString(Envelope))
const decoder = new TextDecoder()

/**
 * The org's events after `afterSeq` (the next ones when undefined). The consumer exists once the
 * returned effect succeeds, so an event published after that is in the stream.
 */
export const follow = Effect.fn("Realtime.follow")(function*(orgId: string, afterSeq: number | undefined) {
  const nats = yield* Nats
  const stream = yield* Streams.ensure()
  const consumer = yield* Effect.tryPromise({
    try: () =>
      nats.js.consumers.get(stream, {
        // One subject (a string): NATS 2.9 takes no list of filters.
        filter_subjects: nats.subject("evt", orgId, ">"),
        ...(afterSeq === undefined
          ? { deliver_policy: DeliverPolicy.New }
          : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: afterSeq + 1 })
      }),
    catch: (cause) => new BusError({ operation: "events: follow", message: String(cause) })
  }).pipe(Effect.tapError(() => Streams.forget))
  const messages = yield* consumeScoped(consumer, "events: consume").pipe(Effect.tapError(() => Streams.forget))
  return Stream.fromAsyncIterable(
    messages,
    (cause) => new BusError({ operation: "events: read", message: String(cause) })
  ).pipe(
    Stream.map((message): StreamedEvent | undefined => {
      const json = decoder.decode(message.data)
      const envelope = decodeEnvelope(json)
      // Another org's subject cannot come through the filter; a malformed message is skipped.
      if (Option.isNone(envelope) || envelope.value.org_id !== orgId) return undefined
      return { seq: message.seq, name: envelope.value.event as EventName, json, data: envelope.value.data }
    }),
    Stream.filter((event): event is StreamedEvent => event !== undefined)
  )
})
