import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * `Idempotency-Key` on POST /v1/webhooks (docs/contract.md#conventions): the first create with a
 * key stores the request's hash and its response (the record and the signing secret, as answered);
 * within 24 h the same key and body get that response again (200), another body is 422
 * `idempotency_key_reused`. Rows older than 24 h are dropped when the org next uses a key.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_idempotency (
      org_id text NOT NULL,
      key text NOT NULL,
      request_hash text NOT NULL,
      response jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (org_id, key)
    )
  `
})
