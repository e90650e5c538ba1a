import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * The trace context of the span that wrote an outbox row (a W3C `traceparent`), which the relay
 * sends as the message's `traceparent` header: one request stays one trace across the outbox.
 * NULL when no trace exporter was configured in the writer (nothing to continue).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE outbox ADD COLUMN trace text`
})
