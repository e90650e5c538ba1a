import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * A sandbox's lifecycle (packages/sandboxes/src/Sandboxes/Lifecycle.ts): idleness, what a
 * timeout does, the deletion of stopped sandboxes, auto-resume, and why it last stopped.
 *
 * - `timeout_from`: where `timeout_s` counts from (its start, or the last keep-alive).
 * - `last_activity_at`, `busy`: what its host last reported of its activity (`busy`: something
 *   runs in it, it is never idle).
 * - `due_at`: the next moment the supervisor has something to do with it (its lifetime ends, it
 *   turns idle, a stopped one is to be deleted), or null; kept by the actor's store from the
 *   row's other columns, so that one sweep reads the due rows through one index, never scanning
 *   the table.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE sandboxes
      ADD COLUMN idle_timeout_s integer,
      ADD COLUMN on_timeout text NOT NULL DEFAULT 'stop' CHECK (on_timeout IN ('stop', 'delete')),
      ADD COLUMN auto_delete_s integer,
      ADD COLUMN auto_resume boolean NOT NULL DEFAULT false,
      ADD COLUMN timeout_from timestamptz,
      ADD COLUMN last_activity_at timestamptz,
      ADD COLUMN busy boolean NOT NULL DEFAULT false,
      ADD COLUMN stop_reason text,
      ADD COLUMN due_at timestamptz
  `
  // Sandboxes running with a timeout_s from before this migration count from their start.
  yield* sql`
    UPDATE sandboxes SET timeout_from = started_at,
      due_at = started_at + make_interval(secs => timeout_s)
    WHERE state = 'running' AND timeout_s IS NOT NULL`
  yield* sql`CREATE INDEX sandboxes_due ON sandboxes (due_at) WHERE due_at IS NOT NULL`
})
