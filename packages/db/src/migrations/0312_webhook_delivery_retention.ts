import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Deliveries are pruned after the retention period (DeliveryStore.pruneFinished), oldest first.
 * On `created_at`, which never changes: an index on `updated_at` or on the status would make
 * every status change of a delivery write an index entry (no HOT update), once per attempt.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at)`
  yield* sql`CREATE INDEX webhooks_deleted ON webhooks (deleted_at) WHERE deleted_at IS NOT NULL`
})
