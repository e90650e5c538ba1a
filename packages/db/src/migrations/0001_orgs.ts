import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE orgs (
      id text PRIMARY KEY,
      name text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    )
  `
  // Domain events are written here in the same transaction as the change that causes them; a
  // relay publishes them to JetStream with Nats-Msg-Id = id and marks them sent.
  yield* sql`
    CREATE TABLE outbox (
      id text PRIMARY KEY,
      subject text NOT NULL,
      payload jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      sent_at timestamptz
    )
  `
  yield* sql`CREATE INDEX outbox_unsent ON outbox (created_at) WHERE sent_at IS NULL`
})
