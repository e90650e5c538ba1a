import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * The templates that want a warm pool: what the settling loop looks through every second for a
 * pool whose host went down (`@svc/templates/Settle`), without a pass over every template.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE INDEX templates_pooled ON templates (id) WHERE pool_size > 0 AND state = 'ready' AND deleted_at IS NULL
  `
})
