import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Sandboxes (packages/sandboxes): the record of docs/contract.md#sandbox-record and the sandbox
 * actor's state, one row per sandbox, written only by the actor's compare-and-set on `version` (and
 * inserted by the API at create). Deleted sandboxes stay, with `state = 'deleted'` and
 * `deleted_at`.
 *
 * Indexes: the org's list newest first (optionally by state), children of a parent, what a
 * host holds (placement and the host-down watcher), and sandboxes waiting in a transitional
 * state (the timeout sweeper).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE sandboxes (
      id text PRIMARY KEY,
      org_id text NOT NULL REFERENCES orgs (id),
      name text NOT NULL,
      template_id text NOT NULL,
      template_name text NOT NULL,
      host_id text,
      parent_id text REFERENCES sandboxes (id),
      state text NOT NULL CHECK (state IN ('pending', 'starting', 'running', 'stopping', 'stopped', 'deleting', 'deleted', 'error')),
      type text NOT NULL CHECK (type IN ('persistent', 'ephemeral')),
      region text NOT NULL,
      datacenter text,
      agent_ready boolean NOT NULL DEFAULT false,
      runtime_ready boolean NOT NULL DEFAULT false,
      runtime_reason text,
      cpu integer NOT NULL CHECK (cpu > 0),
      ram_mb integer NOT NULL CHECK (ram_mb > 0),
      disk_gb integer NOT NULL CHECK (disk_gb > 0),
      vsock_cid integer,
      internal_ip text,
      exposed_ports jsonb NOT NULL DEFAULT '[]',
      volume_attachments jsonb NOT NULL DEFAULT '[]',
      metadata jsonb NOT NULL DEFAULT '{}',
      error_message text,
      timeout_s integer,
      created_at timestamptz NOT NULL,
      started_at timestamptz,
      stopped_at timestamptz,
      deleted_at timestamptz,
      state_since timestamptz NOT NULL,
      last_report_at bigint,
      created_emitted boolean NOT NULL DEFAULT false,
      version bigint NOT NULL
    )
  `
  yield* sql`CREATE INDEX sandboxes_org ON sandboxes (org_id, created_at DESC, id DESC)`
  yield* sql`CREATE INDEX sandboxes_org_state ON sandboxes (org_id, state, created_at DESC, id DESC)`
  yield* sql`CREATE INDEX sandboxes_parent ON sandboxes (parent_id) WHERE parent_id IS NOT NULL`
  yield* sql`CREATE INDEX sandboxes_host ON sandboxes (host_id, state) WHERE host_id IS NOT NULL AND state <> 'deleted'`
  yield* sql`
    CREATE INDEX sandboxes_waiting ON sandboxes (state_since)
    WHERE state IN ('pending', 'starting', 'stopping', 'deleting')
  `
  yield* sql`CREATE INDEX sandboxes_expiring ON sandboxes (started_at) WHERE state = 'running' AND timeout_s IS NOT NULL`
})
