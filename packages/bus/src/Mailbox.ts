/**
 * Where an entity's messages go: `actor.<type>.<partition>.<entityId>`, the partition a stable
 * hash of the id. The addressing lives beside the bus (not in the actor runtime) so that a
 * process that only sends to a mailbox, such as a host agent reporting to its sandboxes' actors,
 * needs neither the runtime nor a database.
 */
import { Effect, Schema } from "effect"
import { Nats } from "./Nats.ts"

/** A mailbox family: an actor type's name and its fixed partition count. */
export interface MailboxAddress {
  readonly type: string
  readonly partitions: number
}

/** A message refused before it reaches a mailbox: an invalid entity id, or a body its Schema refuses. */
export class InvalidActorMessage extends Schema.TaggedError<InvalidActorMessage>()("InvalidActorMessage", {
  type: Schema.String,
  id: Schema.String,
  message: Schema.String
}) {}

/** An entity id is one subject token of a plain alphabet, so an id can never act as a wildcard. */
export const ENTITY_ID = /^[A-Za-z0-9_-]{1,128}$/

const encoder = new TextEncoder()

/** FNV-1a (32 bit) over the UTF-8 bytes: stable across processes, versions and platforms. */
export const fnv1a = (s: string): number => {
  let h = 0x811c9dc5
  for (const byte of encoder.encode(s)) {
    h ^= byte
    h = Math.imul(h, 0x01000193) >>> 0
  }
  return h >>> 0
}

export const partitionOf = (address: { readonly partitions: number }, id: string): number =>
  fnv1a(id) % address.partitions

// Names are relative to the NATS prefix; build the full names with Nats.subject / Nats.name.
export const streamName = (address: { readonly type: string }) => `ACTOR_${address.type.toUpperCase()}`
export const consumerName = (address: { readonly type: string }, partition: number) =>
  `ACTOR_${address.type.toUpperCase()}_${partition}`
export const mailboxTokens = (address: MailboxAddress, id: string): ReadonlyArray<string> => [
  "actor",
  address.type,
  String(partitionOf(address, id)),
  id
]

const checkId = (address: MailboxAddress, id: string) =>
  ENTITY_ID.test(id)
    ? Effect.void
    : Effect.fail(new InvalidActorMessage({ type: address.type, id: id.slice(0, 140), message: "invalid entity id" }))

/** The mailbox subject of an entity (relative to the NATS prefix), checking the id. */
export const subjectOf = (address: MailboxAddress, id: string) =>
  Effect.as(checkId(address, id), mailboxTokens(address, id).join("."))

/** Encodes a message with its Schema; a body the Schema refuses is `InvalidActorMessage`. */
export const encode = <M extends Schema.Top>(address: MailboxAddress, schema: M, id: string, message: M["Type"]) =>
  Effect.mapError(
    Schema.encodeUnknownEffect(schema as any)(message) as Effect.Effect<unknown, Schema.SchemaError>,
    (e) => new InvalidActorMessage({ type: address.type, id, message: e.message })
  )

/**
 * Publishes a message to an entity's mailbox and waits for the stream's ack. With `msgID` the
 * send is idempotent within the duplicate window (and beyond it the runtime's inbox drops a
 * repeated msgID for the same entity).
 */
export const send = Effect.fn("Mailbox.send")(function*<M extends Schema.Top>(
  address: MailboxAddress,
  schema: M,
  id: string,
  message: M["Type"],
  options?: { readonly msgID?: string }
) {
  const nats = yield* Nats
  const subject = yield* subjectOf(address, id)
  const encoded = yield* encode(address, schema, id, message)
  const ack = yield* nats.publishAcked(
    nats.subject(subject),
    encoder.encode(JSON.stringify(encoded)),
    options?.msgID ? { msgId: options.msgID } : undefined
  )
  return { seq: ack.seq, duplicate: ack.duplicate }
})
