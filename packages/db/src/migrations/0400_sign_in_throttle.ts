import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Per-account sign-in backoff (packages/auth `SignInThrottle`): one row per email with a
 * current streak of failed sign-ins, shared by every API process.
 *
 * - Keyed by the SHA-256 of the normalised email, for unknown emails too (the backoff must not
 *   tell which emails have accounts), so the addresses people typed are not stored.
 * - A row is deleted at a successful sign-in; rows quiet for 24 h are pruned.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE sign_in_failures (
      email_hash text PRIMARY KEY,
      failures integer NOT NULL CHECK (failures > 0),
      last_failure_at timestamptz NOT NULL,
      blocked_until timestamptz
    )
  `
  yield* sql`CREATE INDEX sign_in_failures_last ON sign_in_failures (last_failure_at)`
})
