/**
 * The actor model, pure: an actor type is a name, a partition count, a state Schema, a message
 * Schema and a transition `(state | undefined, message, context) → { state, effects }`.
 *
 * Effects are data. The runtime writes them to the outbox in the transition's own transaction,
 * so an event or a command to another actor is published if and only if the state change
 * committed, even when the process dies right after the commit.
 */
import type { JsonSchema } from "@svc/bus/Codec"
import type { Sender } from "@svc/bus/Mailbox"
import type { DomainEvent } from "@svc/events/Outbox"
import type { Effect, Option } from "effect"
import type { SqlClient, SqlError, Statement } from "effect/sql"
import type { CorruptState } from "./Errors.ts"

/** What a transition knows besides the state and the message; time is an input, not a read. */
export interface TransitionContext {
  /** The entity id (the mailbox subject's token after the partition). */
  readonly id: string
  /**
   * Who sent the message, when its subject names a sender (`actor.<type>.<p>.<id>.<kind>.<senderId>`):
   * NATS permissions decide who may publish on such a subject, so this is trustworthy where the
   * body's own claims are not. Absent for the control plane's messages.
   */
  readonly sender?: Sender
  /** Time the runtime started applying the message (ms since the epoch). */
  readonly now: number
  /** The message's id: its `Nats-Msg-Id`, or `seq:<stream sequence>` when it was sent without one. */
  readonly msgId: string
}

/** A domain event `evt.<orgId>.<event>` with the envelope of docs/contract.md#envelope (ts = context.now). */
export interface EmitEvent {
  readonly _tag: "Event"
  readonly event: DomainEvent
}

/** A message to an actor (possibly this one): published through the outbox, msgID = row id. */
export interface SendMessage {
  readonly _tag: "Send"
  readonly actor: AnyActor
  readonly id: string
  readonly message: unknown
}

/** Any other subject (relative to the NATS prefix, e.g. `["agent", hostId, "create"]`). */
export interface PublishMessage {
  readonly _tag: "Publish"
  readonly subject: string | ReadonlyArray<string>
  /** JSON value; encode with the subject's Schema before returning it from the transition. */
  readonly payload: unknown
}

/** A KV put (`value`) or delete (`value` null) of `key` in the bucket `bucket` (base name). */
export interface KvOperation {
  readonly _tag: "Kv"
  readonly bucket: string
  readonly key: string
  /** JSON value; null deletes the key. */
  readonly value: unknown
}

export type ActorEffect = EmitEvent | SendMessage | PublishMessage | KvOperation

/**
 * The result of a transition. `state: undefined` is only meaningful when there was no state
 * (the message does not create the entity): nothing is stored, the effects still apply.
 */
export interface Transition<S> {
  readonly state: S | undefined
  readonly effects: ReadonlyArray<ActorEffect>
}

export interface Actor<S extends JsonSchema, M extends JsonSchema> {
  /** Lowercase name: `[a-z][a-z0-9_]*`, at most 32 characters. A mailbox subject token. */
  readonly type: string
  /** Partition count P, fixed for the life of the type (changing it re-routes entities). */
  readonly partitions: number
  readonly state: S
  readonly message: M
  readonly transition: (
    state: S["Type"] | undefined,
    message: M["Type"],
    context: TransitionContext
  ) => Transition<S["Type"]>
  /** Where the state lives; default: the generic `actor_state` table (Store.ts). */
  readonly store?: ActorStore<S["Type"]>
}

/** A stored state and its version (1 for a new entity, +1 per transition). */
export interface Stored<S> {
  readonly version: number
  readonly state: S
}

/**
 * Where an actor type keeps its state. Both operations run inside the runtime's transaction.
 * `save` is a compare-and-set: with `expected` undefined it creates the entity and returns
 * false if it exists already; otherwise it updates only if the stored version is `expected`
 * (setting it to `expected + 1`) and returns false if not.
 */
export interface ActorStore<S> {
  readonly load: (
    id: string
  ) => Effect.Effect<Option.Option<Stored<S>>, SqlError.SqlError | CorruptState, SqlClient.SqlClient>
  readonly save: (
    id: string,
    state: S,
    expected: number | undefined
  ) => Effect.Effect<boolean, SqlError.SqlError | CorruptState, SqlClient.SqlClient>
  /**
   * The same compare-and-set as one step of a larger statement (a data-modifying CTE): an INSERT
   * or UPDATE that writes only where `guard` (a SQL condition) holds too, `RETURNING version`.
   * With it the runtime applies a message in one statement (`Commit.ts`) instead of a
   * transaction of four; without it, in the transaction.
   */
  readonly saveStep?: (
    sql: SqlClient.SqlClient,
    id: string,
    state: S,
    expected: number | undefined,
    guard: Statement.Fragment
  ) => Effect.Effect<Statement.Statement<unknown>, CorruptState>
}

// The variance of a definition does not matter where any actor is accepted.
export type AnyActor = Actor<any, any>

const TYPE = /^[a-z][a-z0-9_]{0,31}$/
export const MAX_PARTITIONS = 1024

/** Defines an actor type; an invalid definition is a programming error and throws at once. */
export const make = <S extends JsonSchema, M extends JsonSchema>(definition: Actor<S, M>): Actor<S, M> => {
  if (!TYPE.test(definition.type)) throw new Error(`actor type must match ${TYPE}: ${JSON.stringify(definition.type)}`)
  if (!Number.isInteger(definition.partitions) || definition.partitions < 1 || definition.partitions > MAX_PARTITIONS) {
    throw new Error(`actor ${definition.type}: partitions must be an integer in 1..${MAX_PARTITIONS}`)
  }
  return definition
}

// ---------------------------------------------------------------------------------------------
// Transition helpers

/** The next state, with effects. */
export const next = <S>(state: S, ...effects: ReadonlyArray<ActorEffect>): Transition<S> => ({ state, effects })

/** No state for an entity that does not exist (and is not created by this message). */
export const none = (...effects: ReadonlyArray<ActorEffect>): Transition<never> => ({ state: undefined, effects })

export const emit = (event: DomainEvent): EmitEvent => ({ _tag: "Event", event })

export const send = <M extends JsonSchema>(actor: Actor<any, M>, id: string, message: M["Type"]): SendMessage => ({
  _tag: "Send",
  actor,
  id,
  message
})

export const publish = (subject: string | ReadonlyArray<string>, payload: unknown): PublishMessage => ({
  _tag: "Publish",
  subject,
  payload
})

export const kvPut = (bucket: string, key: string, value: unknown): KvOperation => ({ _tag: "Kv", bucket, key, value })

export const kvDelete = (bucket: string, key: string): KvOperation => ({ _tag: "Kv", bucket, key, value: null })

// ---------------------------------------------------------------------------------------------
// Addressing (shared with processes that only send: see @svc/bus/Mailbox)

export {
  consumerName,
  ENTITY_ID,
  fnv1a,
  mailboxTokens,
  parseMailboxRest,
  partitionOf,
  type Sender,
  streamName
} from "@svc/bus/Mailbox"
