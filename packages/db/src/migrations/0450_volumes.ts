import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Volumes (packages/volumes, docs/contract.md#volumes).
 *
 * - `volumes`: one row per volume. `host_id` is a local volume's host, set when it is first
 *   attached (its image lives there); null for a shared one. Soft-deleted (`deleted_at`): a
 *   deleted volume is missing to the API and its name is free again.
 * - Attachments are not a table: they are the entries of `sandboxes.volume_attachments` of the
 *   sandboxes not deleted (`sandboxes_volume_attachments` finds them by volume id).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE volumes (
      id text PRIMARY KEY,
      org_id text NOT NULL REFERENCES orgs (id),
      name text NOT NULL,
      type text NOT NULL CHECK (type IN ('local', 'shared')),
      size_gb integer NOT NULL CHECK (size_gb >= 1),
      host_id text,
      created_at timestamptz NOT NULL DEFAULT now(),
      deleted_at timestamptz
    )
  `
  yield* sql`CREATE UNIQUE INDEX volumes_org_name ON volumes (org_id, name) WHERE deleted_at IS NULL`
  yield* sql`CREATE INDEX volumes_org_live ON volumes (org_id, created_at DESC, id DESC) WHERE deleted_at IS NULL`
  yield* sql`CREATE INDEX volumes_host ON volumes (host_id) WHERE deleted_at IS NULL AND host_id IS NOT NULL`
  yield* sql`
    CREATE INDEX sandboxes_volume_attachments ON sandboxes USING gin (volume_attachments jsonb_path_ops)
  `
})
