import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Identity and access (packages/auth): users, sessions, API keys, the audit log.
 *
 * - Emails are stored normalised (trimmed, lowercased) and are unique across the platform: a
 *   sign-in names an email only, so the email decides the org.
 * - Sessions and keys store the SHA-256 of their secret only.
 * - `audit_log` is append-only: a trigger refuses UPDATE, DELETE and TRUNCATE, so not even a
 *   bug (or a compromised app role short of owning the table) can rewrite history.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE users (
      id text PRIMARY KEY,
      org_id text NOT NULL REFERENCES orgs (id),
      email text NOT NULL UNIQUE,
      password_hash text NOT NULL,
      created_at timestamptz NOT NULL
    )
  `
  yield* sql`CREATE INDEX users_org ON users (org_id)`
  yield* sql`
    CREATE TABLE sessions (
      id text PRIMARY KEY,
      token_hash text NOT NULL UNIQUE,
      user_id text NOT NULL REFERENCES users (id),
      org_id text NOT NULL REFERENCES orgs (id),
      created_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL,
      ended_at timestamptz
    )
  `
  yield* sql`CREATE INDEX sessions_expires_at ON sessions (expires_at)`
  yield* sql`
    CREATE TABLE api_keys (
      id text PRIMARY KEY,
      org_id text NOT NULL REFERENCES orgs (id),
      user_id text REFERENCES users (id),
      name text NOT NULL,
      prefix text NOT NULL,
      token_hash text NOT NULL UNIQUE,
      scopes text[] NOT NULL,
      created_at timestamptz NOT NULL,
      last_used_at timestamptz,
      expires_at timestamptz,
      revoked_at timestamptz
    )
  `
  yield* sql`CREATE INDEX api_keys_org ON api_keys (org_id, created_at DESC, id DESC)`
  yield* sql`
    CREATE TABLE audit_log (
      id text PRIMARY KEY,
      org_id text NOT NULL REFERENCES orgs (id),
      action text NOT NULL,
      actor_type text NOT NULL CHECK (actor_type IN ('user', 'api_key', 'operator', 'anonymous')),
      actor_id text,
      target_id text,
      ip text,
      user_agent text,
      created_at timestamptz NOT NULL
    )
  `
  yield* sql`CREATE INDEX audit_log_org ON audit_log (org_id, created_at DESC, id DESC)`
  yield* sql`CREATE INDEX audit_log_org_action ON audit_log (org_id, action, created_at DESC, id DESC)`
  yield* sql`
    CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION 'audit_log is append-only (% refused)', TG_OP;
    END
    $$
  `
  yield* sql`
    CREATE TRIGGER audit_log_no_update_delete BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()
  `
  yield* sql`
    CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()
  `
})
