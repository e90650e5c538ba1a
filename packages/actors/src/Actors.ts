/**
 * Talking to actors from outside a transition: declaring their mailboxes, sending them messages
 * (directly, or through the outbox inside a transaction), reading their state.
 *
 * Mailboxes: subject `actor.<type>.<partition>.<entityId>` on stream `ACTOR_<TYPE>` (workqueue
 * retention), one durable pull consumer `ACTOR_<TYPE>_<partition>` per partition with
 * `max_ack_pending: 1`: at most one message per partition in flight cluster-wide.
 */
import { AckPolicy, DeliverPolicy } from "@nats-io/jetstream"
import type { JsonSchema } from "@svc/bus/Codec"
import * as Mailbox from "@svc/bus/Mailbox"
import { ensureConsumer, ensureStream } from "@svc/bus/Topology"
import * as Outbox from "@svc/events/Outbox"
import { Duration, Effect, Option } from "effect"
import { SqlClient } from "effect/sql"
import {
  type Actor,
  type ActorEffect,
  type AnyActor,
  consumerName,
  ENTITY_ID,
  partitionOf,
  type Stored,
  streamName
} from "./Actor.ts"
import { InvalidActorMessage } from "./Errors.ts"
import { storeOf } from "./Store.ts"

/** How long a message may stay un-acked before it is redelivered, unless the runtime is told otherwise. */
export const DEFAULT_ACK_WAIT = Duration.seconds(30)

export interface MailboxOptions {
  /** How long a message may stay un-acked before it is redelivered (default `DEFAULT_ACK_WAIT`). */
  readonly ackWait?: Duration.Input
  /** How long unprocessed messages are kept (default 30 days). */
  readonly maxAge?: Duration.Input
  /** Window within which a repeated msgID is dropped (default 10 min). */
  readonly duplicateWindow?: Duration.Input
}

const millis = (d: Duration.Input) => Duration.toMillis(Duration.fromInputUnsafe(d))

/** Creates or updates an actor type's stream and its P consumers (idempotent). */
export const ensure = Effect.fn("Actors.ensure")(function*(actor: AnyActor, options: MailboxOptions = {}) {
  const stream = streamName(actor)
  const full = yield* ensureStream({
    name: stream,
    subjects: [`actor.${actor.type}.>`],
    retention: "workqueue",
    maxAgeMs: millis(options.maxAge ?? Duration.days(30)),
    duplicateWindowMs: millis(options.duplicateWindow ?? Duration.minutes(10))
  })
  const ackWaitNanos = millis(options.ackWait ?? DEFAULT_ACK_WAIT) * 1_000_000
  for (let p = 0; p < actor.partitions; p++) {
    yield* ensureConsumer(stream, {
      durable_name: consumerName(actor, p),
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      max_ack_pending: 1,
      ack_wait: ackWaitNanos,
      filter_subject: `actor.${actor.type}.${p}.>`
    })
  }
  return full
})

const encodeMessage = <M extends JsonSchema>(actor: Actor<any, M>, id: string, message: M["Type"]) =>
  Mailbox.encode(actor, actor.message, id, message)

/** The mailbox subject of an entity (relative to the NATS prefix), checking the id. */
export const mailbox = (actor: AnyActor, id: string) => Mailbox.subjectOf(actor, id)

/** The partition an entity's messages go to. */
export const partition = (actor: AnyActor, id: string) => partitionOf(actor, id)

/**
 * Publishes a message to an entity's mailbox and waits for the stream's ack. With `msgID` the
 * send is idempotent within the duplicate window (and beyond it the runtime's inbox drops a
 * repeated msgID for the same entity).
 */
export const send = <M extends JsonSchema>(
  actor: Actor<any, M>,
  id: string,
  message: M["Type"],
  options?: { readonly msgID?: string }
) => Mailbox.send(actor, actor.message, id, message, options)

/** A message to an entity's mailbox as an outbox message (for `Outbox.appendAll` or `Commit.ts`). */
export const outboxMessage = <M extends JsonSchema>(
  actor: Actor<any, M>,
  id: string,
  message: M["Type"]
): Effect.Effect<Outbox.OutboxMessage, InvalidActorMessage> =>
  Effect.gen(function*() {
    const subject = yield* mailbox(actor, id)
    const payload = yield* encodeMessage(actor, id, message)
    return { subject, payload }
  })

/**
 * Writes the message to the outbox in the ambient transaction: it is sent if and only if the
 * transaction commits (msgID = the outbox row id). Use it where a Postgres change and a command
 * must go together (e.g. create a resource row and tell its actor).
 */
export const sendViaOutbox = Effect.fn("Actors.sendViaOutbox")(function*<M extends JsonSchema>(
  actor: Actor<any, M>,
  id: string,
  message: M["Type"]
) {
  const outbox = yield* outboxMessage(actor, id, message)
  return yield* Effect.mapError(
    Outbox.append(outbox),
    (e) => new InvalidActorMessage({ type: actor.type, id, message: e.message })
  )
})

/**
 * Records, in the ambient transaction, that `version` of an entity was stored by something other
 * than a mailbox message (the API creating a sandbox, or applying a command under the row lock),
 * so that the inbox stays the entity's complete transition log. `msgId` must be unique per entity.
 */
export const recordTransition = Effect.fn("Actors.recordTransition")(function*(
  actor: AnyActor,
  id: string,
  msgId: string,
  version: number
) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`INSERT INTO actor_inbox (type, entity_id, msg_id, version) VALUES (${actor.type}, ${id}, ${msgId}, ${version})`
})

/** An entity's current state and version, if it exists. */
export const get = Effect.fn("Actors.get")(function*<S extends JsonSchema>(actor: Actor<S, any>, id: string) {
  if (!ENTITY_ID.test(id)) return Option.none<Stored<S["Type"]>>()
  return yield* storeOf(actor).load(id)
})

/**
 * A transition's effects as outbox messages, exactly as the runtime writes them: events get the
 * spec envelope stamped `now`; commands are encoded with their actor's message Schema and
 * addressed to its mailbox; other subjects are checked. For code that applies a transition
 * outside the runtime (under its own row lock) and must write the same rows.
 */
export const toOutbox = (effects: ReadonlyArray<ActorEffect>, now: number) =>
  Effect.forEach(
    effects,
    (effect): Effect.Effect<Outbox.OutboxMessage, Outbox.InvalidOutboxMessage | InvalidActorMessage> => {
      switch (effect._tag) {
        case "Event":
          return Effect.map(Outbox.makeEnvelope(effect.event, now), (payload) => ({
            subject: Outbox.eventSubject(effect.event.orgId, effect.event.event),
            payload
          }))
        case "Send":
          return Effect.gen(function*() {
            const subject = yield* mailbox(effect.actor, effect.id)
            const payload = yield* encodeMessage(effect.actor, effect.id, effect.message)
            return { subject, payload }
          })
        case "Publish":
          return Effect.map(Outbox.subjectOf(effect.subject), (subject) => ({ subject, payload: effect.payload }))
        case "Kv":
          return Effect.succeed(
            effect.value === null
              ? Outbox.kvDelete(effect.bucket, effect.key)
              : Outbox.kvPut(effect.bucket, effect.key, effect.value)
          )
      }
    }
  )
