import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * `Idempotency-Key` on POST /v1/sandboxes (docs/contract.md#conventions): the first successful
 * create with a key stores the request's hash and its response; within 24 h the same key and body
 * get that response again (200), another body is 422 `idempotency_key_reused`. A row older
 * than 24 h is replaced by the next use of its key.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE sandbox_idempotency (
      org_id text NOT NULL REFERENCES orgs (id),
      key text NOT NULL,
      request_hash text NOT NULL,
      sandbox_id text NOT NULL,
      response jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (org_id, key)
    )
  `
  yield* sql`CREATE INDEX sandbox_idempotency_created ON sandbox_idempotency (created_at)`
})
