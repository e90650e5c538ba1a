import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Templates (packages/templates/src/Store.ts): one row per template of an org, its build's
 * state and, once ready, its image (`root` and `layers`, see @svc/host-protocol/Images). Names
 * are unique among the org's live templates; a deleted one keeps its row (`deleted_at`).
 * `deadline_at` is when a build still `building` is failed by the control plane.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE templates (
      id text PRIMARY KEY,
      org_id text NOT NULL REFERENCES orgs (id),
      name text NOT NULL,
      base text NOT NULL,
      root text NOT NULL CHECK (root IN ('base', 'debian')),
      layers jsonb NOT NULL DEFAULT '[]',
      env jsonb NOT NULL DEFAULT '{}',
      steps jsonb NOT NULL DEFAULT '[]',
      start_cmd text,
      ready_cmd text,
      state text NOT NULL CHECK (state IN ('building', 'ready', 'failed')),
      image text,
      error_message text,
      build_log text,
      host_id text,
      deadline_at timestamptz NOT NULL,
      created_at timestamptz NOT NULL,
      built_at timestamptz,
      deleted_at timestamptz
    )
  `
  yield* sql`CREATE UNIQUE INDEX templates_org_name ON templates (org_id, name) WHERE deleted_at IS NULL`
  yield* sql`CREATE INDEX templates_org ON templates (org_id, created_at DESC, id DESC) WHERE deleted_at IS NULL`
  yield* sql`CREATE INDEX templates_building ON templates (deadline_at) WHERE state = 'building'`
})
