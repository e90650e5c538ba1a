/**
 * The actor runtime: pulls every partition's mailbox consumer of the given actor types and
 * applies each message exactly once:
 *
 *   decode → load state + version → transition (pure) → ONE statement (Commit.ts) {
 *     record the message id in actor_inbox with the version it produces (a repeat is a no-op:
 *     ack and move on; the rows are each entity's transition log),
 *     compare-and-set the state on its version (a stale version reloads and retries),
 *     append the effects to the outbox
 *   } → ack.
 *
 * Two round trips per message (load, the statement); a store without `saveStep` does the writes
 * as a transaction (five).
 *
 * Several runtime processes pulling the same durable consumers share the partitions; the
 * consumers' `max_ack_pending: 1` keeps one message per partition in flight cluster-wide.
 * A message that cannot be decoded, is mis-routed, or whose transition throws is terminated
 * (`term()`, bare: servers before 2.10.4 ignore a reason) and logged, so it never blocks its
 * partition. An infrastructure failure (Postgres down) naks the message with a delay: the
 * partition waits, in order, until it can go on.
 */
import type { JsMsg } from "@nats-io/jetstream"
import { consumeScoped } from "@svc/bus/Consume"
import { BusError, Nats } from "@svc/bus/Nats"
import * as Trace from "@svc/bus/Trace"
import * as Outbox from "@svc/events/Outbox"
import { OutboxRelay } from "@svc/events/Relay"
import { Clock, Context, Duration, Effect, Layer, Metric, Option, Schedule, Schema } from "effect"
import { SqlClient, type SqlError } from "effect/sql"
import {
  type ActorEffect,
  type ActorStore,
  type AnyActor,
  consumerName,
  parseMailboxRest,
  partitionOf,
  type Sender,
  streamName
} from "./Actor.ts"
import { DEFAULT_ACK_WAIT, ensure, type MailboxOptions, toOutbox } from "./Actors.ts"
import { commit } from "./Commit.ts"
import type { CorruptState } from "./Errors.ts"
import { storeOf } from "./Store.ts"

/** Identifies the message being applied (for hooks and logs). */
export interface MessageInfo {
  readonly type: string
  readonly partition: number
  readonly id: string
  /** The sender its subject names, if any (`Mailbox.ts`). */
  readonly sender?: Sender
  readonly msgId: string
  readonly streamSeq: number
  readonly deliveries: number
}

/** What became of one message: applied, a duplicate, ended for good, or left to come back. */
export type MessageOutcome = "applied" | "duplicate" | "terminated" | "retry"

export interface RuntimeHooks {
  /** Inside the transaction, after the state and outbox writes, before COMMIT. */
  readonly beforeCommit?: (info: MessageInfo) => Effect.Effect<void>
  /** After COMMIT, before the ack. */
  readonly afterCommit?: (info: MessageInfo) => Effect.Effect<void>
  /** After the message was acked, terminated or nak'ed. */
  readonly onOutcome?: (info: MessageInfo | undefined, outcome: MessageOutcome) => Effect.Effect<void>
}

export interface ActorRuntimeOptions extends MailboxOptions {
  /** Delay before a message that failed on infrastructure comes back (default 1 s). */
  readonly retryDelay?: Duration.Input
  /** Compare-and-set retries before giving the message back to the stream (default 10). */
  readonly maxStaleRetries?: number
  /** Pull batch of each partition's consumer (default 16; one is in flight at a time anyway). */
  readonly pullBatch?: number
  /** How long processed message ids are kept (default 7 days; longer than any redelivery). */
  readonly inboxRetention?: Duration.Input
  /** Test hooks. */
  readonly hooks?: RuntimeHooks
}

export interface RuntimeStats {
  readonly applied: number
  readonly duplicate: number
  readonly terminated: number
  readonly retry: number
}

/** Messages settled, by actor type and outcome (Prometheus: `svc_actor_messages_total`). */
export const ActorMessages = Metric.counter("svc_actor_messages_total", {
  description: "Actor mailbox messages settled by the actor runtime, by actor type and outcome",
  incremental: true
})

const byOutcome = new Map<string, Metric.Counter<number>>()
/** The counter of one type and outcome, made once (a message then costs one update). */
const handled = (type: string, outcome: MessageOutcome): Metric.Counter<number> => {
  const key = `${type}:${outcome}`
  let counter = byOutcome.get(key)
  if (counter === undefined) {
    counter = Metric.withAttributes(ActorMessages, { type, outcome })
    byOutcome.set(key, counter)
  }
  return counter
}

class Stale extends Schema.TaggedError<Stale>()("Stale", {}) {}
class Poison extends Schema.TaggedError<Poison>()("Poison", { reason: Schema.String }) {}

const decoder = new TextDecoder()

export class ActorRuntime extends Context.Service<ActorRuntime, {
  readonly types: ReadonlyArray<string>
  readonly stats: Effect.Effect<RuntimeStats>
}>()("@svc/actors/ActorRuntime") {
  static readonly make = Effect.fn("ActorRuntime.make")(function*(
    actors: ReadonlyArray<AnyActor>,
    options: ActorRuntimeOptions = {}
  ) {
    const nats = yield* Nats
    const sql = yield* SqlClient.SqlClient
    const relay = yield* Effect.serviceOption(OutboxRelay)
    const wakeRelay = Option.isSome(relay) ? relay.value.wake : Effect.void
    const hooks = options.hooks ?? {}
    const retryDelayMs = Duration.toMillis(Duration.fromInputUnsafe(options.retryDelay ?? Duration.seconds(1)))
    const ackWaitMs = Duration.toMillis(Duration.fromInputUnsafe(options.ackWait ?? DEFAULT_ACK_WAIT))
    const maxStale = options.maxStaleRetries ?? 10
    const stats = { applied: 0, duplicate: 0, terminated: 0, retry: 0 }

    const types = new Set<string>()
    for (const actor of actors) {
      if (types.has(actor.type)) return yield* Effect.die(new Error(`actor type ${actor.type} given twice`))
      types.add(actor.type)
    }

    /** Effects → outbox messages; an effect that cannot be written poisons the message. */
    const outboxOf = (effects: ReadonlyArray<ActorEffect>, now: number) =>
      toOutbox(effects, now).pipe(Effect.mapError((e) => new Poison({ reason: `effect refused: ${e.message}` })))

    /**
     * The transition's writes in one statement (Commit.ts): one round trip instead of four. With
     * a `beforeCommit` hook (tests), in a transaction that the hook holds open before COMMIT.
     */
    const commitOne = (
      actor: AnyActor,
      store: ActorStore<unknown>,
      info: MessageInfo,
      state: unknown,
      expected: number | undefined,
      outbox: ReadonlyArray<Outbox.OutboxMessage>
    ) =>
      Effect.gen(function*() {
        const messages = yield* Outbox.prepareAll(outbox).pipe(
          Effect.mapError((e) => new Poison({ reason: `effect: ${e.message}` }))
        )
        const write = commit(actor, store, { id: info.id, msgId: info.msgId, state, expected, messages })
        if (hooks.beforeCommit === undefined) return yield* write
        const beforeCommit = hooks.beforeCommit
        return yield* sql.withTransaction(Effect.tap(write, (o) => o === "applied" ? beforeCommit(info) : Effect.void))
      })

    const apply = (actor: AnyActor, info: MessageInfo, message: unknown) =>
      Effect.gen(
        function*(): Effect.fn.Return<
          "applied" | "duplicate",
          Poison | CorruptState | BusError | SqlError.SqlError,
          SqlClient.SqlClient
        > {
          const store = storeOf(actor)
          for (let attempt = 0;; attempt++) {
            const loaded = yield* store.load(info.id)
            const prev = Option.getOrUndefined(loaded)
            const now = yield* Clock.currentTimeMillis
            let result
            try {
              result = actor.transition(prev?.state, message, {
                id: info.id,
                now,
                msgId: info.msgId,
                ...(info.sender ? { sender: info.sender } : {})
              })
            } catch (cause) {
              return yield* new Poison({ reason: `transition threw: ${String(cause)}` })
            }
            // `undefined` for an existing entity keeps its state (still a CAS: the effects were
            // computed from this version).
            const state = result.state === undefined ? prev?.state : result.state
            const outbox = yield* outboxOf(result.effects, now)
            const outcome = state === undefined || store.saveStep !== undefined
              ? yield* commitOne(actor, store, info, state, prev?.version, outbox)
              : yield* sql.withTransaction(Effect.gen(function*() {
                // The version this transition stores (the store counts from 1): the entity's transition log.
                const version = state === undefined ? null : (prev?.version ?? 0) + 1
                const fresh = yield* sql`
              INSERT INTO actor_inbox (type, entity_id, msg_id, version)
              VALUES (${actor.type}, ${info.id}, ${info.msgId}, ${version})
              ON CONFLICT DO NOTHING RETURNING 1 AS fresh`
                if (fresh.length === 0) return "duplicate" as const
                if (state !== undefined && !(yield* store.save(info.id, state, prev?.version))) {
                  return yield* new Stale()
                }
                yield* Outbox.appendAll(outbox).pipe(
                  Effect.mapError((e) =>
                    e._tag === "InvalidOutboxMessage" ? new Poison({ reason: `effect: ${e.message}` }) : e
                  )
                )
                if (hooks.beforeCommit) yield* hooks.beforeCommit(info)
                return "applied" as const
              })).pipe(
                Effect.map((o) => o as "applied" | "duplicate" | "stale"),
                Effect.catchTag("Stale", () => Effect.succeed("stale" as const))
              )
            if (outcome !== "stale") return outcome
            if (attempt >= maxStale) {
              return yield* Effect.fail(new BusError({ operation: "apply", message: "state kept changing underneath" }))
            }
            yield* Effect.logDebug("actor: stale version, reloading", { type: info.type, id: info.id })
          }
        }
      )

    // Messages being applied. Long work keeps its message: one heartbeat for all of them tells
    // the server every ack_wait/3 that we are still on it (a message held that long is rare).
    const inFlight = new Set<JsMsg>()
    yield* Effect.forkScoped(Effect.forever(Effect.andThen(
      Effect.sleep(Duration.millis(Math.max(100, ackWaitMs / 3))),
      Effect.sync(() => {
        for (const msg of inFlight) {
          try {
            msg.working()
          } catch {}
        }
      })
    )))

    /** Applies one message and settles it with the stream; never fails. */
    const handle = (actor: AnyActor, partition: number, msg: JsMsg) =>
      Effect.gen(function*() {
        const base = nats.subject("actor", actor.type, String(partition)) + "."
        const address = msg.subject.startsWith(base) ? parseMailboxRest(msg.subject.slice(base.length)) : undefined
        const id = address?.id ?? ""
        const info: MessageInfo = {
          type: actor.type,
          partition,
          id,
          ...(address?.sender ? { sender: address.sender } : {}),
          msgId: msg.headers?.get("Nats-Msg-Id") || `seq:${msg.seq}`,
          streamSeq: msg.seq,
          deliveries: msg.info.deliveryCount
        }
        const settle = (outcome: MessageOutcome) =>
          Effect.gen(function*() {
            stats[outcome]++
            yield* Metric.update(handled(actor.type, outcome), 1)
            try {
              if (outcome === "applied" || outcome === "duplicate") msg.ack()
              else if (outcome === "terminated") msg.term()
              else msg.nak(retryDelayMs)
            } catch {
              // Connection gone: the stream redelivers after ack_wait and the inbox absorbs it.
            }
            if (hooks.onOutcome) yield* hooks.onOutcome(info, outcome)
          })

        const work = Effect.gen(function*() {
          if (address === undefined || partitionOf(actor, id) !== partition) {
            return yield* new Poison({ reason: `not a mailbox subject of partition ${partition}: ${msg.subject}` })
          }
          let json: unknown
          try {
            json = JSON.parse(decoder.decode(msg.data))
          } catch {
            return yield* new Poison({ reason: "body is not JSON" })
          }
          // Message schemas need no services (`Actor.make` takes plain codecs).
          const decoded = Schema.decodeUnknownEffect(actor.message)(json) as Effect.Effect<unknown, Schema.SchemaError>
          const message = yield* decoded.pipe(
            Effect.mapError((e) => new Poison({ reason: `message refused: ${e.message}` }))
          )
          const outcome = yield* apply(actor, info, message)
          // The relay of this process (if any) publishes the effects now, without waiting for
          // Postgres' notification (the commit's pg_notify stays for relays elsewhere).
          if (outcome === "applied") yield* wakeRelay
          if (outcome === "applied" && hooks.afterCommit) yield* hooks.afterCommit(info)
          return outcome
        })

        inFlight.add(msg)
        const outcome = yield* work.pipe(
          // The sender's trace goes on here (its `traceparent` header); nothing without an exporter.
          Effect.catchTags({
            Poison: (e) =>
              Effect.as(
                Effect.logError("actor: message terminated", { ...info, subject: msg.subject, reason: e.reason }),
                "terminated" as const
              ),
            CorruptState: (e: CorruptState) =>
              Effect.as(
                Effect.logError("actor: message terminated", { ...info, reason: `corrupt state: ${e.message}` }),
                "terminated" as const
              )
          }),
          Effect.catchCause((cause) =>
            Effect.as(
              Effect.logWarning("actor: message failed, will retry", { ...info, cause: String(cause) }),
              "retry" as const
            )
          ),
          // The sender's trace goes on here (its `traceparent` header); nothing without an exporter.
          Trace.continueMessage(`ActorRuntime.handle ${actor.type}`, msg.headers, {
            attributes: { "actor.type": actor.type, "actor.id": id, "actor.partition": partition }
          }),
          Effect.ensuring(Effect.sync(() => inFlight.delete(msg))),
          // Shut down mid-message: give it back at once (if the connection still allows).
          Effect.onInterrupt(() =>
            Effect.sync(() => {
              try {
                msg.nak()
              } catch {}
            })
          )
        )
        yield* settle(outcome)
      })

    const runPartition = (actor: AnyActor, partition: number) =>
      Effect.scoped(Effect.gen(function*() {
        const stream = nats.name(streamName(actor))
        const durable = nats.name(consumerName(actor, partition))
        const consumer = yield* Effect.tryPromise({
          try: () => nats.js.consumers.get(stream, durable),
          catch: (cause) => new BusError({ operation: `consumer ${durable}`, message: String(cause) })
        })
        const messages = yield* consumeScoped(consumer, `consume ${durable}`, { max_messages: options.pullBatch ?? 16 })
        const iterator = messages[Symbol.asyncIterator]()
        for (;;) {
          const next = yield* Effect.tryPromise({
            try: () => iterator.next(),
            catch: (cause) => new BusError({ operation: `consume ${durable}`, message: String(cause) })
          })
          if (next.done) return yield* new BusError({ operation: `consume ${durable}`, message: "consumer stopped" })
          yield* handle(actor, partition, next.value)
        }
      })).pipe(
        Effect.tapError((e) =>
          Effect.logWarning("actor: partition consumer lost, restarting", {
            type: actor.type,
            partition,
            error: String(e)
          })
        ),
        Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(100)), Schedule.spaced(Duration.seconds(5))]))
      )

    for (const actor of actors) yield* ensure(actor, options)
    for (const actor of actors) {
      for (let p = 0; p < actor.partitions; p++) yield* Effect.forkScoped(runPartition(actor, p))
    }

    const retentionSeconds = Duration.toSeconds(Duration.fromInputUnsafe(options.inboxRetention ?? Duration.days(7)))
    yield* Effect.forkScoped(Effect.forever(Effect.andThen(
      Effect.sleep(Duration.minutes(10)),
      sql`DELETE FROM actor_inbox WHERE processed_at < now() - make_interval(secs => ${retentionSeconds})`.pipe(
        Effect.catchCause((cause) => Effect.logWarning("actor: inbox prune failed", { cause: String(cause) }))
      )
    )))

    return ActorRuntime.of({
      types: [...types],
      stats: Effect.sync(() => ({ ...stats }))
    })
  })

  /**
   * Runs the given actor types; needs `Nats` and `SqlClient` (and the relay elsewhere). Given an
   * `OutboxRelay`, wakes it after each commit.
   */
  static readonly layer = (actors: ReadonlyArray<AnyActor>, options?: ActorRuntimeOptions) =>
    Layer.effect(ActorRuntime, ActorRuntime.make(actors, options))
}
