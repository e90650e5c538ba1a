import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * The stream sequence of the job message that carries a delivery's current round. JetStream's
 * delivery count cannot be the attempt number on its own (server 2.9.10 was seen re-delivering a
 * job with count 1 after the dispatcher holding it was killed), so the database numbers the
 * attempts; a second copy of a job (published again past the stream's duplicate window) is told
 * apart by its sequence and does nothing. A manual retry starts a round with a new job: NULL.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE webhook_deliveries ADD COLUMN job_seq bigint`
})
