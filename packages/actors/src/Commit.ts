/**
 * A transition written in ONE statement (a data-modifying CTE) instead of a transaction of four
 * or more (BEGIN, the inbox row, the compare-and-set, the outbox rows, COMMIT): the same writes,
 * all or none, as a statement commits (or, inside a transaction, joins it). For stores with a
 * `saveStep` (both of this repository's).
 *
 *   dup    the message's inbox row, as the statement's snapshot sees it;
 *   saved  the compare-and-set, guarded by "no such row";
 *   fresh  the inbox row with the version stored, only when saved (a row inserted meanwhile by a
 *          concurrent apply of the same message conflicts: the statement fails, nothing is
 *          written, and the message comes back);
 *   queued the outbox rows, only when fresh.
 *
 * So: a duplicate writes nothing; a stale version writes nothing (the caller reloads; a
 * concurrent apply of the same message then shows as the duplicate); otherwise all is written.
 * With no state to store (`state` undefined: the message does not create the entity), the inbox
 * row (version NULL) is inserted unless present, and the outbox rows with it.
 */
import * as Trace from "@svc/bus/Trace"
import * as Outbox from "@svc/events/Outbox"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { ActorStore, AnyActor } from "./Actor.ts"

export type CommitOutcome = "applied" | "duplicate" | "stale"

/** The statement's one row (booleans of Postgres' own making: nothing to decode). */
interface OutcomeRow {
  readonly duplicate: boolean
  readonly applied: boolean
}

export interface CommitInput<S> {
  readonly id: string
  /** The message's id: the entity's inbox row. */
  readonly msgId: string
  /** The state to store; undefined: none (the entity does not exist and is not created). */
  readonly state: S | undefined
  /** The version loaded (undefined: the entity is new). */
  readonly expected: number | undefined
  /** The outbox rows, in order (`Outbox.prepareAll`). */
  readonly messages: ReadonlyArray<Outbox.PreparedMessage>
}

/** Writes a transition in one statement; the store must have a `saveStep` when `state` is set. */
export const commit = <S>(actor: AnyActor, store: ActorStore<S>, input: CommitInput<S>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { expected, id, messages, msgId, state } = input
    const type = actor.type
    // The writer's span, which the relay sends along (Trace.ts): NULL without an exporter.
    const trace = (yield* Trace.current) ?? null
    const queued = messages.length === 0
      ? sql``
      : sql`, queued AS (${Outbox.insertAllFrom(sql, messages, "fresh", trace)})`
    if (state === undefined) {
      const [row] = yield* sql<OutcomeRow>`
        WITH fresh AS (
          INSERT INTO actor_inbox (type, entity_id, msg_id, version) VALUES (${type}, ${id}, ${msgId}, NULL)
          ON CONFLICT DO NOTHING RETURNING 1
        )${queued}
        SELECT NOT EXISTS (SELECT 1 FROM fresh) AS duplicate, EXISTS (SELECT 1 FROM fresh) AS applied`
      return row!.applied ? "applied" as const : "duplicate" as const
    }
    if (store.saveStep === undefined) {
      return yield* Effect.die(new Error(`actor ${type}: its store has no saveStep`))
    }
    const save = yield* store.saveStep(sql, id, state, expected, sql`NOT EXISTS (SELECT 1 FROM dup)`)
    const [row] = yield* sql<OutcomeRow>`
      WITH dup AS (
        SELECT 1 FROM actor_inbox WHERE type = ${type} AND entity_id = ${id} AND msg_id = ${msgId}
      ), saved AS (${save}), fresh AS (
        INSERT INTO actor_inbox (type, entity_id, msg_id, version) SELECT ${type}, ${id}, ${msgId}, version FROM saved
        RETURNING 1
      )${queued}
      SELECT EXISTS (SELECT 1 FROM dup) AS duplicate, EXISTS (SELECT 1 FROM fresh) AS applied`
    return row!.duplicate ? "duplicate" as const : row!.applied ? "applied" as const : "stale" as const
  })
