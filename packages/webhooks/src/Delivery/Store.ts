/**
 * The dispatcher's reads and writes of deliveries and attempt rows. Each write is ONE statement
 * guarded by the delivery's round and status under its row lock, so a manual retry, a second
 * copy of a job or a late result can never move a delivery twice; the decisions themselves are
 * DeliveryStates.ts's.
 */
import * as Rows from "@svc/db/Rows"
import { makeId } from "@svc/domain/Ids"
import type { DeliveryStatus } from "@svc/domain/Webhook"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { ClaimState } from "./DeliveryStates.ts"
import {
  LOST_ATTEMPT_ERROR,
  NOT_ATTEMPTED_DELETED,
  NOT_ATTEMPTED_LOST,
  NOT_ATTEMPTED_PAUSED
} from "./DeliveryStates.ts"
import { MAX_ATTEMPTS } from "./RetrySchedule.ts"

export interface DeliveryData {
  readonly webhookId: string
  readonly url: string
  readonly secret: string
  readonly event: string
  readonly body: string
}

// The statuses the tables' CHECK constraints allow (DeliveryStates's `DeliveryStatus`, `AttemptStatus`).
const DELIVERY_STATUSES = ["pending", "succeeded", "failed", "dead_letter"] as const
const RowDeliveryStatus = Schema.Literals(DELIVERY_STATUSES)
const RowAttemptStatus = Schema.Literals([...DELIVERY_STATUSES, "retried"])

const claimRows = Rows.decoder(
  "DeliveryStore.loadClaims",
  Schema.Struct({
    id: Schema.String,
    status: RowDeliveryStatus,
    round: Schema.Int,
    job_seq: Schema.NullOr(Rows.Int8),
    webhook_id: Schema.String,
    event: Schema.String,
    body: Schema.String,
    url: Schema.String,
    secret: Schema.String,
    enabled: Schema.Boolean,
    deleted: Schema.Boolean,
    last_attempt: Schema.NullOr(Schema.Int),
    last_status: Schema.NullOr(RowAttemptStatus)
  })
)

export interface LoadedClaim {
  readonly state: ClaimState
  readonly data: DeliveryData | null
}

const missing: LoadedClaim = {
  state: { delivery: null, webhook: { enabled: false, deleted: true }, lastAttempt: null },
  data: null
}

/** The deliveries, their webhooks and their last attempt of the current round (one round trip). */
export const loadClaims = Effect.fn("DeliveryStore.loadClaims")(function*(deliveryIds: ReadonlyArray<string>) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* claimRows(sql`
    SELECT d.id, d.status, d.round, d.job_seq, d.webhook_id, d.event, d.body, w.url, w.secret, w.enabled,
           (w.deleted_at IS NOT NULL) AS deleted, a.attempt AS last_attempt, a.status AS last_status
    FROM webhook_deliveries d
    JOIN webhooks w ON w.id = d.webhook_id
    LEFT JOIN LATERAL (
      SELECT attempt, status FROM webhook_attempts
      WHERE delivery_id = d.id AND round = d.round ORDER BY attempt DESC LIMIT 1
    ) a ON true
    WHERE d.id = ANY(${[...new Set(deliveryIds)]}::text[])`)
  const byId = new Map(rows.map((row) => [row.id, row]))
  return deliveryIds.map((id): LoadedClaim => {
    const row = byId.get(id)
    if (row === undefined) return missing
    return {
      state: {
        delivery: { status: row.status, round: row.round, jobSeq: row.job_seq === null ? null : Number(row.job_seq) },
        webhook: { enabled: row.enabled, deleted: row.deleted },
        lastAttempt: row.last_attempt === null ? null : { attempt: row.last_attempt, status: row.last_status! }
      },
      data: { webhookId: row.webhook_id, url: row.url, secret: row.secret, event: row.event, body: row.body }
    }
  })
})

/** One delivery's claim state (see `loadClaims`). */
export const loadClaim = (deliveryId: string) => Effect.map(loadClaims([deliveryId]), (claims) => claims[0]!)

export interface ClaimInput {
  readonly deliveryId: string
  readonly webhookId: string
  readonly round: number
  /** The job message's stream sequence (DeliveryStates.ClaimJob). */
  readonly jobSeq: number
  /** The call already made on the fast path, to record as the attempt. */
  readonly made?: {
    readonly outcome: "succeeded" | "failed"
    readonly responseCode: number | null
    readonly error: string | null
    readonly durationMs: number
  }
}

export type ClaimResult =
  /** Nothing to do (unknown, another webhook's, stale round, finished, a second copy of the job). */
  | { readonly _tag: "Skip" }
  /** No call (webhook paused or deleted, or the sixth attempt was the last): the delivery is now dead_letter. */
  | { readonly _tag: "Abandoned" }
  /** Make the attempt: its row is written, pending. */
  | { readonly _tag: "Attempt"; readonly attemptId: string; readonly attempt: number; readonly data: DeliveryData }
  /** The call made on the fast path is recorded as `attempt`, with the status it leaves. */
  | { readonly _tag: "Recorded"; readonly attempt: number; readonly status: "succeeded" | "failed" | "dead_letter" }

const claimedRows = Rows.decoder(
  "DeliveryStore.claimAttempts",
  Schema.Struct({
    id: Schema.String,
    status: RowDeliveryStatus,
    attempt: Schema.Int,
    exhausted: Schema.Boolean,
    made: Schema.NullOr(Schema.String),
    webhook_id: Schema.String,
    // Null for a recorded call.
    event: Schema.NullOr(Schema.String),
    body: Schema.NullOr(Schema.String),
    url: Schema.NullOr(Schema.String),
    secret: Schema.NullOr(Schema.String)
  })
)

/**
 * Claims attempts in ONE statement, applying `DeliveryStates.decideClaim`'s rules under each
 * delivery's row lock (DeliveryStatesSql.test.ts checks the two agree case by case):
 * - skip an unknown delivery, one of another webhook, an older round, a finished delivery, or a
 *   second copy of the round's job (another stream sequence);
 * - number the attempt: one more than the round's highest row;
 * - close a highest row still `pending` (its dispatcher died) as failed;
 * - before a call, a paused or deleted webhook (deleted wins): the row is written `dead_letter`
 *   with the reason, and the delivery with it, without a call;
 * - a job back after its sixth attempt's dispatcher died: no seventh; the sixth row and the
 *   delivery are dead;
 * - a call already made: its row is written with its result (`dead_letter` for a sixth failure,
 *   `next_attempt_at` from `waitsMs`, the ladder's five waits); else the row is `pending`;
 * - the delivery takes the row's status and remembers the job's sequence.
 * At most one input per delivery in a call.
 */
export const claimAttempts = Effect.fn("DeliveryStore.claimAttempts")(function*(
  inputs: ReadonlyArray<ClaimInput>,
  waitsMs: ReadonlyArray<number>
) {
  if (inputs.length === 0) return [] as ReadonlyArray<ClaimResult>
  const sql = yield* SqlClient.SqlClient
  const attemptIds = inputs.map(() => makeId("attempt"))
  const deliveryIds = inputs.map((c) => c.deliveryId)
  const rows = yield* claimedRows(sql`
    WITH input AS (
      -- JSON rather than parallel arrays: one typed record per claim.
      SELECT * FROM jsonb_to_recordset(${
    JSON.stringify(inputs.map((c, i) => ({
      attempt_id: attemptIds[i],
      delivery_id: c.deliveryId,
      webhook_id: c.webhookId,
      round: c.round,
      job_seq: c.jobSeq,
      made: c.made?.outcome ?? null,
      response_code: c.made?.responseCode ?? null,
      error: c.made?.error ?? null,
      duration_ms: c.made?.durationMs ?? null
    })))
  }::jsonb) AS t(attempt_id text, delivery_id text, webhook_id text, round int, job_seq bigint,
                         made text, response_code int, error text, duration_ms int)
    ), d AS (
      -- "= ANY(ids)" beside the join: index lookups whatever the planner guesses of the input.
      SELECT i.*, wd.event, wd.body, w.url, w.secret, last.attempt AS last_attempt, last.status AS last_status,
             CASE WHEN w.deleted_at IS NOT NULL THEN 'deleted' WHEN NOT w.enabled THEN 'paused' ELSE 'live' END AS webhook_state
      FROM webhook_deliveries wd
      JOIN input i ON i.delivery_id = wd.id
      JOIN webhooks w ON w.id = wd.webhook_id
      LEFT JOIN LATERAL (
        SELECT a.attempt, a.status FROM webhook_attempts a
        WHERE a.delivery_id = wd.id AND a.round = wd.round ORDER BY a.attempt DESC LIMIT 1
      ) last ON true
      WHERE wd.id = ANY(${deliveryIds}::text[]) AND wd.webhook_id = i.webhook_id AND wd.round = i.round
        AND wd.status IN ('pending', 'failed') AND (wd.job_seq IS NULL OR wd.job_seq = i.job_seq)
      FOR UPDATE OF wd
    ), numbered AS (
      SELECT d.*, COALESCE(last_attempt, 0) + 1 AS attempt FROM d
    ), decided AS (
      SELECT n.*, attempt > ${MAX_ATTEMPTS}::int AS exhausted,
             CASE WHEN made = 'succeeded' THEN 'succeeded'
                  WHEN made = 'failed' THEN CASE WHEN attempt >= ${MAX_ATTEMPTS}::int THEN 'dead_letter' ELSE 'failed' END
                  WHEN webhook_state <> 'live' THEN 'dead_letter'
                  ELSE 'pending' END AS row_status,
             CASE WHEN made IS NOT NULL THEN n.error
                  WHEN webhook_state = 'deleted' THEN ${NOT_ATTEMPTED_DELETED}
                  WHEN webhook_state = 'paused' THEN ${NOT_ATTEMPTED_PAUSED} END AS row_error,
             -- A call already made started duration_ms ago.
             now() - make_interval(secs => COALESCE(CASE WHEN made IS NOT NULL THEN n.duration_ms END, 0) / 1000.0) AS started_at
      FROM numbered n
    ), prev AS (
      -- The highest row still pending: its dispatcher died. Dead when it was the sixth.
      UPDATE webhook_attempts a SET status = CASE WHEN decided.exhausted THEN 'dead_letter' ELSE 'failed' END,
             error = ${LOST_ATTEMPT_ERROR}, next_attempt_at = CASE WHEN decided.exhausted THEN NULL ELSE now() END
      FROM decided
      WHERE a.delivery_id = ANY(${deliveryIds}::text[]) AND a.delivery_id = decided.delivery_id
        AND a.round = decided.round AND a.attempt = decided.last_attempt AND decided.last_status = 'pending'
    ), ins AS (
      INSERT INTO webhook_attempts (id, delivery_id, webhook_id, round, attempt, status, response_code, error, duration_ms, next_attempt_at, created_at)
      SELECT attempt_id, delivery_id, webhook_id, round, attempt, row_status,
             CASE WHEN made IS NOT NULL THEN response_code END, row_error, CASE WHEN made IS NOT NULL THEN duration_ms END,
             CASE WHEN row_status = 'failed' THEN now() + make_interval(secs => (${waitsMs}::int[])[attempt] / 1000.0) END,
             started_at
      FROM decided WHERE NOT exhausted
      ON CONFLICT (delivery_id, round, attempt) DO NOTHING
      RETURNING id, delivery_id, status, attempt
    ), moved AS (
      SELECT ins.delivery_id, ins.status, decided.job_seq FROM ins JOIN decided ON decided.attempt_id = ins.id
      UNION ALL
      SELECT delivery_id, 'dead_letter', job_seq FROM decided WHERE exhausted
    ), upd AS (
      UPDATE webhook_deliveries wd SET status = moved.status, job_seq = moved.job_seq, updated_at = now()
      FROM moved WHERE wd.id = ANY(${deliveryIds}::text[]) AND wd.id = moved.delivery_id
    )
    -- What a call needs comes back only for claims before a call: a recorded one has made it.
    SELECT decided.attempt_id AS id, COALESCE(ins.status, 'dead_letter') AS status, decided.attempt, decided.exhausted,
           decided.made, decided.webhook_id,
           CASE WHEN decided.made IS NULL THEN decided.event END AS event,
           CASE WHEN decided.made IS NULL THEN decided.body END AS body,
           CASE WHEN decided.made IS NULL THEN decided.url END AS url,
           CASE WHEN decided.made IS NULL THEN decided.secret END AS secret
    FROM decided LEFT JOIN ins ON ins.id = decided.attempt_id
    WHERE ins.id IS NOT NULL OR decided.exhausted`)
  const byId = new Map(rows.map((row) => [row.id, row]))
  return attemptIds.map((id, i): ClaimResult => {
    const row = byId.get(id)
    if (row === undefined) return { _tag: "Skip" }
    if (row.exhausted) return { _tag: "Abandoned" }
    if (inputs[i]!.made !== undefined && row.status !== "pending") {
      return { _tag: "Recorded", attempt: row.attempt, status: row.status }
    }
    if (row.status === "dead_letter") return { _tag: "Abandoned" }
    return {
      _tag: "Attempt",
      attemptId: id,
      attempt: row.attempt,
      data: { webhookId: row.webhook_id, url: row.url!, secret: row.secret!, event: row.event!, body: row.body! }
    }
  })
})

export interface ResultWrite {
  readonly attemptId: string
  readonly deliveryId: string
  readonly round: number
  readonly status: Exclude<DeliveryStatus, "pending">
  readonly responseCode: number | null
  readonly error: string | null
  readonly durationMs: number
  /** Wait before the next attempt (failed only). */
  readonly delayMs: number | null
}

/** Records claimed attempts' results on their rows and moves their deliveries (only if still this round). */
export const writeResults = Effect.fn("DeliveryStore.writeResults")(function*(results: ReadonlyArray<ResultWrite>) {
  if (results.length === 0) return [] as ReadonlyArray<void>
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    WITH input AS (
      SELECT * FROM jsonb_to_recordset(${
    JSON.stringify(results.map((r) => ({
      attempt_id: r.attemptId,
      round: r.round,
      status: r.status,
      response_code: r.responseCode,
      error: r.error,
      duration_ms: r.durationMs,
      delay_ms: r.delayMs
    })))
  }::jsonb) AS t(attempt_id text, round int, status text, response_code int, error text, duration_ms int, delay_ms int)
    ), a AS (
      UPDATE webhook_attempts wa SET
        status = i.status, response_code = i.response_code, error = i.error, duration_ms = i.duration_ms,
        next_attempt_at = CASE WHEN i.delay_ms IS NULL THEN NULL ELSE now() + make_interval(secs => i.delay_ms / 1000.0) END
      FROM input i WHERE wa.id = ANY(${
    results.map((r) => r.attemptId)
  }::text[]) AND wa.id = i.attempt_id AND wa.status = 'pending'
      RETURNING wa.delivery_id, i.round, i.status
    )
    UPDATE webhook_deliveries d SET status = a.status, updated_at = now()
    FROM a WHERE d.id = ANY(${results.map((r) => r.deliveryId)}::text[]) AND d.id = a.delivery_id AND d.round = a.round`
  return results.map(() => undefined) as ReadonlyArray<void>
})

/**
 * A job whose sixth delivery was never acknowledged (its dispatcher died): the pending last
 * attempt is closed dead (or a dead row added when it never started), the delivery is
 * dead_letter. Guarded like the other writes; returns whether anything changed.
 */
export const writeLostJob = Effect.fn("DeliveryStore.writeLostJob")(function*(options: {
  readonly deliveryId: string
  readonly round: number
  readonly addAttempt: number | null
}) {
  const sql = yield* SqlClient.SqlClient
  const attemptId = makeId("attempt")
  const rows = yield* sql`
    WITH d AS (
      SELECT id, webhook_id FROM webhook_deliveries
      WHERE id = ${options.deliveryId} AND round = ${options.round}::int AND status IN ('pending', 'failed')
      FOR UPDATE
    ), closed AS (
      UPDATE webhook_attempts SET
        status = CASE WHEN ${options.addAttempt}::int IS NULL AND attempt = (
                   SELECT max(attempt) FROM webhook_attempts WHERE delivery_id = ${options.deliveryId} AND round = ${options.round}::int
                 ) THEN 'dead_letter' ELSE 'failed' END,
        error = ${LOST_ATTEMPT_ERROR}
      WHERE delivery_id IN (SELECT id FROM d) AND round = ${options.round}::int AND status = 'pending'
      RETURNING id
    ), added AS (
      INSERT INTO webhook_attempts (id, delivery_id, webhook_id, round, attempt, status, error)
      SELECT ${attemptId}, d.id, d.webhook_id, ${options.round}::int, ${options.addAttempt}::int, 'dead_letter', ${NOT_ATTEMPTED_LOST}
      FROM d WHERE ${options.addAttempt}::int IS NOT NULL
      ON CONFLICT (delivery_id, round, attempt) DO NOTHING
      RETURNING id
    )
    UPDATE webhook_deliveries SET status = 'dead_letter', updated_at = now()
    WHERE id IN (SELECT id FROM d)
    RETURNING id`
  return rows.length > 0
})

/**
 * Last attempts left `pending` longer than `olderThanMs` (their dispatcher died and no one heard
 * the server's MAX_DELIVERIES advisory): dead. Returns how many deliveries it closed.
 */
export const sweepLostLastAttempts = Effect.fn("DeliveryStore.sweepLostLastAttempts")(function*(olderThanMs: number) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql`
    WITH lost AS (
      SELECT a.id, a.delivery_id, a.round FROM webhook_attempts a
      WHERE a.status = 'pending' AND a.attempt = 6
        AND a.created_at < now() - make_interval(secs => ${olderThanMs}::int / 1000.0)
      LIMIT 1000
    ), closed AS (
      UPDATE webhook_attempts SET status = 'dead_letter', error = ${LOST_ATTEMPT_ERROR}
      WHERE id IN (SELECT id FROM lost)
    )
    UPDATE webhook_deliveries d SET status = 'dead_letter', updated_at = now()
    FROM lost WHERE d.id = lost.delivery_id AND d.round = lost.round AND d.status = 'pending'
    RETURNING d.id`
  return rows.length
})

/**
 * Deletes up to `limit` finished deliveries (succeeded or dead_letter) created and last changed
 * more than `retentionMs` ago, with their attempts, then deleted webhooks older than that which no
 * delivery refers to any more. Rows another pruner holds are skipped. Returns the deliveries
 * deleted (call again while it returns `limit`).
 */
export const pruneFinished = Effect.fn("DeliveryStore.pruneFinished")(function*(retentionMs: number, limit = 1_000) {
  const retentionS = retentionMs / 1_000
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql`
    WITH doomed AS (
      -- Created before the period and finished since at least the period: a delivery still on
      -- its ladder (at most 7 h 12 min, or a manual retry) is kept.
      SELECT id FROM webhook_deliveries
      WHERE created_at < now() - make_interval(secs => ${retentionS}::float8)
        AND status IN ('succeeded', 'dead_letter') AND updated_at < now() - make_interval(secs => ${retentionS}::float8)
      ORDER BY created_at LIMIT ${limit}::int
      FOR UPDATE SKIP LOCKED
    ), attempts AS (
      DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM doomed)
    )
    DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM doomed)
    RETURNING id`
  yield* sql`
    DELETE FROM webhooks w
    WHERE w.deleted_at < now() - make_interval(secs => ${retentionS}::float8)
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.webhook_id = w.id)`
  return rows.length
})
