import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Finished deliveries are pruned after the retention period (DeliveryStore.pruneFinished): the
 * oldest finished ones, found without scanning the live ones.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (updated_at) WHERE status IN ('succeeded', 'dead_letter')`
  yield* sql`CREATE INDEX webhooks_deleted ON webhooks (deleted_at) WHERE deleted_at IS NOT NULL`
})
