import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * The outbox keeps a message's JSON exactly as its producer wrote it (`json`, not `jsonb`, which
 * would reorder keys and add spaces): what the relay publishes, and so what webhook receivers
 * get and sign-check, is the envelope `{event, org_id, ts, data}` in that order, compact.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE outbox ALTER COLUMN payload TYPE json USING payload::json`
})
