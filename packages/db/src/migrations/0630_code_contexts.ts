import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Code contexts (packages/sandboxes/src/Contexts.ts): one row per context, so every API process
 * serves every context and a restarted API keeps them. The interpreter is the sandbox's process
 * `pid`, started at `pid_started_at` (the agent's `startedAt` for it: a pid reused by another
 * process has another start time). `running` is set while an API process has a run under way;
 * `dead` once an interpreter was seen ended. The execution count is the interpreter's own.
 *
 * Sandboxes stay as rows once deleted, so their contexts go with the transition to `deleted`
 * (a trigger, in the transition's transaction); the foreign key cascades should a sandbox's row
 * ever be removed. A create holds the sandbox's row (`FOR NO KEY UPDATE`) while it counts and
 * inserts: the per-sandbox limit holds across API processes, and no context is inserted for a
 * sandbox whose deletion committed meanwhile.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE code_contexts (
      id text PRIMARY KEY,
      org_id text NOT NULL REFERENCES orgs (id),
      sandbox_id text NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
      language text NOT NULL CHECK (language IN ('python', 'javascript', 'bash')),
      cwd text NOT NULL,
      socket text NOT NULL,
      pid integer NOT NULL,
      pid_started_at text NOT NULL,
      running boolean NOT NULL DEFAULT false,
      dead boolean NOT NULL DEFAULT false,
      created_at timestamptz NOT NULL
    )
  `
  yield* sql`CREATE INDEX code_contexts_sandbox ON code_contexts (sandbox_id, created_at, id)`
  yield* sql`
    CREATE FUNCTION code_contexts_of_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      DELETE FROM code_contexts WHERE sandbox_id = NEW.id;
      RETURN NULL;
    END $$
  `
  yield* sql`
    CREATE TRIGGER sandboxes_code_contexts AFTER UPDATE OF state ON sandboxes
    FOR EACH ROW WHEN (NEW.state = 'deleted' AND OLD.state <> 'deleted')
    EXECUTE FUNCTION code_contexts_of_deleted()
  `
})
