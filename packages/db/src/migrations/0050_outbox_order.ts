import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * The relay publishes outbox rows in `seq` order. Ids are time-sortable but made by many
 * processes whose clocks differ; a sequence drawn inside the writing transaction orders the
 * rows of one entity causally (its transactions are serialised by the entity's own row lock).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE outbox ADD COLUMN seq bigserial NOT NULL`
  yield* sql`CREATE INDEX outbox_pending ON outbox (seq) WHERE sent_at IS NULL`
  yield* sql`CREATE INDEX outbox_sent_at ON outbox (sent_at) WHERE sent_at IS NOT NULL`
})
