import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * One `Idempotency-Key` store for every create (@svc/db/Idempotency), replacing the two
 * per-feature tables of 0201 (sandboxes) and 0302 (webhooks).
 *
 * An entry is claimed (`entry` NULL) and recorded (`entry` set) in the create's own
 * transaction, so a committed row always has its entry. `entry` is sealed with SecretBox: the
 * request hash and the first response, which may hold a secret shown once.
 *
 * The old tables are dropped with their rows: they are caches of at most 24 h, and their
 * responses were stored in plain text. A client retrying within 24 h of this migration with a
 * key used before it gets a new resource instead of a replay.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE idempotency_keys (
      org_id text NOT NULL,
      operation text NOT NULL,
      key text NOT NULL,
      entry text,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (org_id, operation, key)
    )
  `
  yield* sql`CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at)`
  yield* sql`DROP TABLE sandbox_idempotency`
  yield* sql`DROP TABLE webhook_idempotency`
})
