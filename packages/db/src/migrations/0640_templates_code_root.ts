import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Templates may stack on the platform-built `code` root (debian with python's data stack and node,
 * `packages/host/src/Debian.ts`) as they do on `debian`.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE templates DROP CONSTRAINT IF EXISTS templates_root_check`
  yield* sql`ALTER TABLE templates ADD CONSTRAINT templates_root_check CHECK (root IN ('base', 'debian', 'code'))`
})
