/**
 * Applying a user command (start, stop, delete) to a sandbox synchronously, in the API's own
 * request: the same pure transition the actor runs, under the row lock and the same
 * compare-and-set, with its effects written to the outbox in the same transaction. The API can
 * then answer with the state the command produced (202 `stopping`) or refuse it (409), and a
 * command and the actor's own messages still apply one at a time, in a single order.
 */
import * as Actors from "@svc/actors/Actors"
import * as Rows from "@svc/db/Rows"
import * as Errors from "@svc/domain/Errors"
import * as Outbox from "@svc/events/Outbox"
import { Clock, Effect } from "effect"
import { SqlClient } from "effect/sql"
import { randomUUID } from "node:crypto"
import { SandboxActor, transition } from "../SandboxActor.ts"
import type { SandboxActorState, SandboxMessage } from "./Model.ts"
import { COLUMNS, SandboxRow, store, toStored } from "./Store.ts"

const locked = Rows.decoder("Sandboxes.applyNow", SandboxRow)

/**
 * Locks the org's sandbox row, asks `decide` for the message (it may refuse, or read more rows
 * in the same transaction), applies the transition, and returns the new state.
 */
export const applyNow = <E, R>(
  orgId: string,
  id: string,
  decide: (state: SandboxActorState) => Effect.Effect<SandboxMessage, E, R>
): Effect.Effect<SandboxActorState, E | Errors.NotFound | Rows.QueryError, R | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql.withTransaction(Effect.gen(function*() {
      const rows = yield* locked(sql`
        SELECT ${sql.literal(COLUMNS)} FROM sandboxes WHERE id = ${id} AND org_id = ${orgId} FOR UPDATE`)
      if (rows.length === 0) return yield* new Errors.NotFound({ error: "Sandbox not found" })
      const stored = toStored(rows[0]!)
      const message = yield* decide(stored.state)
      const now = yield* Clock.currentTimeMillis
      const result = transition(stored.state, message, { id, now, msgId: `api:${now}` })
      const next = result.state ?? stored.state
      const saved = next === stored.state ||
        (yield* store.save(id, next, stored.version).pipe(Effect.catchTag("CorruptState", Effect.die)))
      if (!saved) {
        // Impossible under the row lock; a defect if it happens.
        return yield* Effect.die(new Error(`sandbox ${id}: version moved under the row lock`))
      }
      if (next !== stored.state) {
        yield* Actors.recordTransition(SandboxActor, id, `api:${now}:${randomUUID()}`, stored.version + 1)
      }
      const messages = yield* Actors.toOutbox(result.effects, now).pipe(Effect.orDie)
      yield* Outbox.appendAll(messages).pipe(Effect.catchTag("InvalidOutboxMessage", Effect.die))
      return next
    }))
  }).pipe(Effect.withSpan("Sandboxes.applyNow"))
