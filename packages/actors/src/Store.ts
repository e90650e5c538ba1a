/**
 * The default state store: one generic table, `actor_state(type, id, version, state jsonb,
 * updated_at)` (migration 0051), the state encoded with the actor's Schema. An actor whose
 * state must also be queried as a resource (a sandbox row) can bring its own `ActorStore`
 * over its own table with a `version` column instead.
 */
import { jsonCodec, type JsonSchema } from "@svc/bus/Codec"
import * as Rows from "@svc/db/Rows"
import { Effect, Option, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import type { Actor, ActorStore, AnyActor, Stored } from "./Actor.ts"
import { CorruptState } from "./Errors.ts"

/** A row of `actor_state`, the state as JSON text (decoded with the actor's schema). */
const stateRows = Rows.decoder("ActorStore.load", Schema.Struct({ version: Rows.Int8, state: Schema.String }))

export const jsonStore = <S extends JsonSchema>(actor: Actor<S, any>): ActorStore<S["Type"]> => {
  const { decode, encode } = jsonCodec(actor.state)
  const type = actor.type
  const saveStep = (
    sql: SqlClient.SqlClient,
    id: string,
    state: S["Type"],
    expected: number | undefined,
    guard: Statement.Fragment
  ) =>
    Effect.map(
      Effect.mapError(
        encode(state),
        (e) => new CorruptState({ type, id, message: `new state: ${e.message}` })
      ),
      (json) =>
        expected === undefined
          ? sql`
            INSERT INTO actor_state (type, id, version, state) SELECT ${type}, ${id}, 1, ${json}::jsonb WHERE ${guard}
            ON CONFLICT (type, id) DO NOTHING RETURNING version`
          : sql`
            UPDATE actor_state SET version = version + 1, state = ${json}::jsonb, updated_at = now()
            WHERE type = ${type} AND id = ${id} AND version = ${expected} AND ${guard} RETURNING version`
    )
  return {
    load: Effect.fnUntraced(function*(id: string) {
      const sql = yield* SqlClient.SqlClient
      const rows = yield* stateRows(sql`
        SELECT version, state::text AS state FROM actor_state WHERE type = ${type} AND id = ${id}`).pipe(
        Effect.catchTag("RowDecodeError", (e) => Effect.fail(new CorruptState({ type, id, message: e.message })))
      )
      if (rows.length === 0) return Option.none<Stored<S["Type"]>>()
      const state = yield* Effect.mapError(
        decode(rows[0]!.state),
        (e) => new CorruptState({ type, id, message: e.message })
      )
      return Option.some({ version: Number(rows[0]!.version), state })
    }),
    save: (id: string, state: S["Type"], expected: number | undefined) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const rows = yield* yield* saveStep(sql, id, state, expected, sql`TRUE`)
        return rows.length === 1
      }),
    saveStep
  }
}

const defaults = new WeakMap<AnyActor, ActorStore<unknown>>()

/** The actor's own store, or the generic table. */
export const storeOf = <S extends JsonSchema>(actor: Actor<S, any>): ActorStore<S["Type"]> => {
  if (actor.store) return actor.store
  let store = defaults.get(actor)
  if (!store) {
    store = jsonStore(actor)
    defaults.set(actor, store)
  }
  return store as ActorStore<S["Type"]>
}
