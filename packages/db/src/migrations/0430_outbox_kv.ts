import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * The outbox also carries KV operations (packages/events/src/Outbox.ts, `kvPut` / `kvDelete`):
 * `kv` is `put` or `del` for such a row, whose subject is then `<bucket>.<key>` (the bucket's
 * base name, without the NATS prefix), and NULL for a message, as before. The relay publishes a
 * KV row to `$KV.<prefixed bucket>.<key>`, a `del` with the `KV-Operation: DEL` header.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE outbox ADD COLUMN kv text CHECK (kv IN ('put', 'del'))`
})
