import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Webhooks (packages/webhooks): subscriptions, deliveries and their attempts.
 *
 * - `webhooks`: soft-deleted (`deleted_at`), so that the jobs of a deleted webhook still find
 *   it at their next retry and turn `dead_letter` (docs/contract.md#delivery-states); the API
 *   treats a deleted one as missing. The secret is kept as given: every attempt signs with it.
 * - `webhook_deliveries`: one per (webhook, event); `event_msg_id` is the event's JetStream
 *   message id, unique per webhook, so a fan-out that sees an event again adds nothing. `body`
 *   is the envelope text exactly as sent on every attempt. `round` counts manual retries: a job
 *   carries the round it was published for, and a job of an older round is stale.
 * - `webhook_attempts`: one row per attempt (the deliveries list), unique per (delivery, round,
 *   attempt number): two copies of one job can never both make the same attempt.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhooks (
      id text PRIMARY KEY,
      org_id text NOT NULL,
      url text NOT NULL,
      events text[] NOT NULL,
      secret text NOT NULL,
      enabled boolean NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      deleted_at timestamptz
    )
  `
  yield* sql`CREATE INDEX webhooks_org_live ON webhooks (org_id, id) WHERE deleted_at IS NULL`
  yield* sql`
    CREATE TABLE webhook_deliveries (
      id text PRIMARY KEY,
      webhook_id text NOT NULL REFERENCES webhooks (id),
      org_id text NOT NULL,
      event text NOT NULL,
      event_msg_id text NOT NULL,
      body text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed', 'dead_letter')),
      round integer NOT NULL DEFAULT 1,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (webhook_id, event_msg_id)
    )
  `
  yield* sql`
    CREATE TABLE webhook_attempts (
      id text PRIMARY KEY,
      delivery_id text NOT NULL REFERENCES webhook_deliveries (id),
      webhook_id text NOT NULL,
      round integer NOT NULL,
      attempt integer NOT NULL CHECK (attempt BETWEEN 1 AND 6),
      status text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed', 'dead_letter', 'retried')),
      response_code integer,
      error text,
      duration_ms integer,
      created_at timestamptz NOT NULL DEFAULT now(),
      next_attempt_at timestamptz,
      UNIQUE (delivery_id, round, attempt)
    )
  `
  yield* sql`CREATE INDEX webhook_attempts_list ON webhook_attempts (webhook_id, created_at DESC, id DESC)`
  yield* sql`CREATE INDEX webhook_attempts_by_status ON webhook_attempts (webhook_id, status, created_at DESC, id DESC)`
  // The sweeper's question: last attempts left pending by a dispatcher that died.
  yield* sql`CREATE INDEX webhook_attempts_pending ON webhook_attempts (created_at) WHERE status = 'pending'`
})
