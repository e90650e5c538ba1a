import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Templates from OCI images (packages/templates/src/Templates.ts): the reference asked for
 * (`image_ref`) and the manifest digest pulled (`image_digest`), and how the image says its
 * sandboxes run: the default cwd (`workdir`) and user (`run_as`, numeric `uid:gid`) of execs, and
 * the default exposed ports. A template built on another inherits them.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE templates
      ADD COLUMN image_ref text,
      ADD COLUMN image_digest text,
      ADD COLUMN workdir text,
      ADD COLUMN run_as text,
      ADD COLUMN exposed_ports jsonb NOT NULL DEFAULT '[]'::jsonb
  `
})
