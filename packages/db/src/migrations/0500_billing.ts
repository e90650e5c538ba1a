import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Usage metering, limits and billing events (packages/billing, docs/contract.md#billing).
 *
 * - `billing_limits`: an org's hard limit and alert value (null: none), in micros; they hold
 *   across periods.
 * - `billing_periods`: an org's spend in one calendar month (UTC), kept exact in `spend_units`
 *   (1/1,024,000 of a micro: a millisecond at integer prices per vCPU-second and per
 *   GiB-second is a whole number of them, so nothing is rounded until it is shown), and which
 *   thresholds were announced in it (`pcts_sent`, `alert_sent`): each event fires once.
 * - `billing_runs`: one row per stretch a sandbox spent `running`, with the meter's watermark
 *   `metered_until`. Kept by a trigger on `sandboxes`, in the statement that changes the state,
 *   so every writer (the actor, the API's synchronous commands) records it and none can skip it:
 *   entering `running` opens a run at `started_at`; leaving it closes the run at the
 *   transition's time (`state_since`). Runs stay as the record of what was charged: the period's
 *   spend is the sum of `metered_until - started_at` of its runs at their prices.
 *   Sandboxes running when this migration runs are metered from now on, not from their start.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE billing_limits (
      org_id text PRIMARY KEY REFERENCES orgs (id),
      hard_limit_micros bigint CHECK (hard_limit_micros >= 0),
      alert_micros bigint CHECK (alert_micros >= 0),
      updated_at timestamptz NOT NULL DEFAULT now()
    )
  `
  yield* sql`
    CREATE TABLE billing_periods (
      org_id text NOT NULL REFERENCES orgs (id),
      period_start timestamptz NOT NULL,
      spend_units numeric NOT NULL DEFAULT 0 CHECK (spend_units >= 0),
      pcts_sent smallint[] NOT NULL DEFAULT '{}',
      alert_sent boolean NOT NULL DEFAULT false,
      PRIMARY KEY (org_id, period_start)
    )
  `
  yield* sql`
    CREATE TABLE billing_runs (
      id bigserial PRIMARY KEY,
      sandbox_id text NOT NULL,
      org_id text NOT NULL,
      cpu integer NOT NULL,
      ram_mb integer NOT NULL,
      started_at timestamptz NOT NULL,
      ended_at timestamptz,
      metered_until timestamptz NOT NULL
    )
  `
  yield* sql`CREATE INDEX billing_runs_open ON billing_runs (sandbox_id) WHERE ended_at IS NULL`
  yield* sql`
    CREATE INDEX billing_runs_due ON billing_runs (metered_until) WHERE ended_at IS NULL OR metered_until < ended_at
  `
  yield* sql`
    CREATE FUNCTION billing_track_runs() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.state = 'running' AND (TG_OP = 'INSERT' OR OLD.state <> 'running') THEN
        INSERT INTO billing_runs (sandbox_id, org_id, cpu, ram_mb, started_at, metered_until)
        VALUES (NEW.id, NEW.org_id, NEW.cpu, NEW.ram_mb,
                COALESCE(NEW.started_at, NEW.state_since), COALESCE(NEW.started_at, NEW.state_since));
      ELSIF TG_OP = 'UPDATE' AND OLD.state = 'running' AND NEW.state <> 'running' THEN
        -- A meter may have metered past the transition's time while it committed: what it metered stands.
        UPDATE billing_runs SET ended_at = GREATEST(NEW.state_since, started_at)
        WHERE sandbox_id = NEW.id AND ended_at IS NULL;
      END IF;
      RETURN NULL;
    END $$
  `
  yield* sql`
    CREATE TRIGGER sandboxes_billing_runs AFTER INSERT OR UPDATE OF state ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION billing_track_runs()
  `
  yield* sql`
    INSERT INTO billing_runs (sandbox_id, org_id, cpu, ram_mb, started_at, metered_until)
    SELECT id, org_id, cpu, ram_mb, now(), now() FROM sandboxes WHERE state = 'running'
  `
})
