import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Warm pools per template (docs/architecture.md#warm-pools): `pool_size` sandboxes of the template
 * kept booted on one host, `pool_host_id`, chosen when the pool is first wanted (the host that
 * built the image when it is live). The hosts learn both from the `pools` KV bucket, put through
 * the outbox in the transaction that changes them.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE templates
      ADD COLUMN pool_size integer NOT NULL DEFAULT 0 CHECK (pool_size BETWEEN 0 AND 50),
      ADD COLUMN pool_host_id text
  `
})
