import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Org secrets (packages/secrets) and each sandbox's egress settings (packages/sandboxes).
 *
 * - `secrets`: metadata and the value sealed with SecretBox (AAD `secret:<id>`), never the
 *   plaintext. Soft-deleted (`deleted_at`): the API treats a deleted one as missing, and its
 *   name is free again (unique among the org's live secrets only).
 * - `sandboxes.network`: the egress policy `{allow_out, deny_out}` as the record shows it.
 * - `sandboxes.secret_ids`: the bound secrets, in binding order. A deleted secret is removed
 *   from every sandbox that had it, in the deletion's transaction (`sandboxes_secret_ids` finds
 *   them).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE secrets (
      id text PRIMARY KEY,
      org_id text NOT NULL REFERENCES orgs (id),
      name text NOT NULL,
      allowed_hosts text[] NOT NULL,
      header_name text NOT NULL,
      header_format text NOT NULL,
      sealed_value text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      rotated_at timestamptz,
      deleted_at timestamptz
    )
  `
  yield* sql`CREATE UNIQUE INDEX secrets_org_name ON secrets (org_id, name) WHERE deleted_at IS NULL`
  yield* sql`CREATE INDEX secrets_org_live ON secrets (org_id, created_at DESC, id DESC) WHERE deleted_at IS NULL`
  yield* sql`
    ALTER TABLE sandboxes
      ADD COLUMN network jsonb NOT NULL DEFAULT '{"allow_out": [], "deny_out": []}',
      ADD COLUMN secret_ids text[] NOT NULL DEFAULT '{}'
  `
  yield* sql`CREATE INDEX sandboxes_secret_ids ON sandboxes USING gin (secret_ids)`
})
