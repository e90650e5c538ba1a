import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Apps (packages/apps, docs/contract.md#apps): long-running deployments kept by a controller
 * actor per app.
 *
 * - `apps`: one row per app; `state` is the controller's whole state (jsonb: the spec, its sealed
 *   env, the replicas it keeps, the operations in flight), `version` the actor runtime's
 *   compare-and-set. The API reads the record from the same row. Soft-deleted (`deleted_at`, set
 *   when the controller has removed every replica): a deleted app is missing to the API and its
 *   name is free again.
 * - A replica is an ordinary sandbox whose `metadata.app_id` names its app: a sandbox event finds
 *   its app's controller through the sandbox's own row.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE apps (
      id text PRIMARY KEY,
      org_id text NOT NULL REFERENCES orgs (id),
      name text NOT NULL,
      state jsonb NOT NULL,
      version bigint NOT NULL DEFAULT 1,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      deleted_at timestamptz
    )
  `
  yield* sql`CREATE UNIQUE INDEX apps_org_name ON apps (org_id, name) WHERE deleted_at IS NULL`
  yield* sql`CREATE INDEX apps_org_live ON apps (org_id, created_at DESC, id DESC) WHERE deleted_at IS NULL`
  yield* sql`CREATE INDEX apps_live ON apps (id) WHERE deleted_at IS NULL`
})
