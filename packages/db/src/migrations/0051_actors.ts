import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Actor runtime (packages/actors): the generic state store and the processed-message record.
 *
 * - `actor_state`: one row per entity of every actor type that keeps the default store; each
 *   transition is a compare-and-set on `version`.
 * - `actor_inbox`: the mailbox message ids applied to an entity, written in the transition's
 *   transaction, so a message redelivered after a crash between commit and ack is a no-op.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE actor_state (
      type text NOT NULL,
      id text NOT NULL,
      version bigint NOT NULL,
      state jsonb NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (type, id)
    )
  `
  yield* sql`
    CREATE TABLE actor_inbox (
      type text NOT NULL,
      entity_id text NOT NULL,
      msg_id text NOT NULL,
      processed_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (type, entity_id, msg_id)
    )
  `
  yield* sql`CREATE INDEX actor_inbox_processed_at ON actor_inbox (processed_at)`
})
