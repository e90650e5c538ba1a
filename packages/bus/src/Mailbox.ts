/**
 * Where an entity's messages go: `actor.<type>.<partition>.<entityId>`, the partition a stable
 * hash of the id. The addressing lives beside the bus (not in the actor runtime) so that a
 * process that only sends to a mailbox, such as a host agent reporting to its sandboxes' actors,
 * needs neither the runtime nor a database.
 *
 * A sender that is not the control plane names itself in two more tokens:
 * `actor.<type>.<partition>.<entityId>.<kind>.<senderId>` (a host agent:
 * `actor.sandbox.3.sbx_x.host.h1`). The same partition consumer takes both forms, in order, and
 * the runtime hands the sender to the transition. The subject is what NATS permissions check
 * (an agent's user may publish only `actor.sandbox.*.*.host.<its hostId>`), so the sender comes
 * from the subject and never from the body.
 */
import { Effect, Schema } from "effect"
import { jsonCodec, type JsonSchema } from "./Codec.ts"
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
/** Who sent a message, as its subject says: `{ kind: "host", id: "h1" }` for a host agent. */
export interface Sender {
  readonly kind: string
  readonly id: string
}

/** A sender's kind: one lowercase token. */
export const SENDER_KIND = /^[a-z][a-z0-9_]{0,31}$/

export const mailboxTokens = (address: MailboxAddress, id: string, sender?: Sender): ReadonlyArray<string> => [
  "actor",
  address.type,
  String(partitionOf(address, id)),
  id,
  ...(sender ? [sender.kind, sender.id] : [])
]

/**
 * The tokens after `actor.<type>.<partition>.` of a mailbox subject: the entity id and, if the
 * subject names one, its sender; undefined for anything else.
 */
export const parseMailboxRest = (rest: string): { readonly id: string; readonly sender?: Sender } | undefined => {
  const tokens = rest.split(".")
  if (tokens.length === 1 && ENTITY_ID.test(tokens[0]!)) return { id: tokens[0]! }
  if (tokens.length === 3 && ENTITY_ID.test(tokens[0]!) && SENDER_KIND.test(tokens[1]!) && ENTITY_ID.test(tokens[2]!)) {
    return { id: tokens[0]!, sender: { kind: tokens[1]!, id: tokens[2]! } }
  }
  return undefined
}

const checkId = (address: MailboxAddress, id: string, sender?: Sender) =>
  !ENTITY_ID.test(id)
    ? Effect.fail(new InvalidActorMessage({ type: address.type, id: id.slice(0, 140), message: "invalid entity id" }))
    : sender && !(SENDER_KIND.test(sender.kind) && ENTITY_ID.test(sender.id))
    ? Effect.fail(new InvalidActorMessage({ type: address.type, id, message: "invalid sender" }))
    : Effect.void

/** The mailbox subject of an entity (relative to the NATS prefix), checking the id (and the sender's). */
export const subjectOf = (address: MailboxAddress, id: string, sender?: Sender) =>
  Effect.as(checkId(address, id, sender), mailboxTokens(address, id, sender).join("."))

/** Encodes a message with its Schema; a body the Schema refuses is `InvalidActorMessage`. */
export const encode = <M extends JsonSchema>(address: MailboxAddress, schema: M, id: string, message: M["Type"]) =>
  Effect.mapError(
    jsonCodec(schema).encodeValue(message),
    (e) => new InvalidActorMessage({ type: address.type, id, message: e.message })
  )

/**
 * Publishes a message to an entity's mailbox and waits for the stream's ack. With `msgID` the
 * send is idempotent within the duplicate window (and beyond it the runtime's inbox drops a
 * repeated msgID for the same entity). With `sender` the subject names it (see the module's comment).
 */
export const send = Effect.fn("Mailbox.send")(function*<M extends JsonSchema>(
  address: MailboxAddress,
  schema: M,
  id: string,
  message: M["Type"],
  options?: { readonly msgID?: string; readonly sender?: Sender }
) {
  const nats = yield* Nats
  const subject = yield* subjectOf(address, id, options?.sender)
  const encoded = yield* encode(address, schema, id, message)
  const ack = yield* nats.publishAcked(
    nats.subject(subject),
    encoder.encode(JSON.stringify(encoded)),
    options?.msgID ? { msgId: options.msgID } : undefined
  )
  return { seq: ack.seq, duplicate: ack.duplicate }
})
