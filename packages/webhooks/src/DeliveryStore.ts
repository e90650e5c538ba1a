/**
 * The dispatcher's reads and writes of deliveries and attempt rows. Each write is ONE statement
 * guarded by the delivery's round and status under its row lock, so a manual retry, a second
 * copy of a job or a late result can never move a delivery twice; the decisions themselves are
 * Dispatch.ts's.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { AttemptStatus, ClaimState, DeliveryStatus } from "./Dispatch.ts"
import { LOST_ATTEMPT_ERROR, NOT_ATTEMPTED_LOST } from "./Dispatch.ts"
import { makeId } from "@svc/domain/Ids"

export interface DeliveryData {
  readonly webhookId: string
  readonly url: string
  readonly secret: string
  readonly event: string
  readonly body: string
}

interface ClaimRow {
  readonly status: DeliveryStatus
  readonly round: number
  readonly webhook_id: string
  readonly event: string
  readonly body: string
  readonly url: string
  readonly secret: string
  readonly enabled: boolean
  readonly deleted: boolean
  readonly last_attempt: number | null
  readonly last_status: AttemptStatus | null
}

/** The delivery, its webhook and its last attempt of the current round (one round trip). */
export const loadClaim = Effect.fn("DeliveryStore.loadClaim")(function*(deliveryId: string) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<ClaimRow>`
    SELECT d.status, d.round, d.webhook_id, d.event, d.body, w.url, w.secret, w.enabled,
           (w.deleted_at IS NOT NULL) AS deleted, a.attempt AS last_attempt, a.status AS last_status
    FROM webhook_deliveries d
    JOIN webhooks w ON w.id = d.webhook_id
    LEFT JOIN LATERAL (
      SELECT attempt, status FROM webhook_attempts
      WHERE delivery_id = d.id AND round = d.round ORDER BY attempt DESC LIMIT 1
    ) a ON true
    WHERE d.id = ${deliveryId}`
  const row = rows[0]
  if (row === undefined) {
    return { state: { delivery: null, webhook: { enabled: false, deleted: true }, lastAttempt: null } satisfies ClaimState, data: null }
  }
  const state: ClaimState = {
    delivery: { status: row.status, round: row.round },
    webhook: { enabled: row.enabled, deleted: row.deleted },
    lastAttempt: row.last_attempt === null ? null : { attempt: row.last_attempt, status: row.last_status! }
  }
  const data: DeliveryData = { webhookId: row.webhook_id, url: row.url, secret: row.secret, event: row.event, body: row.body }
  return { state, data }
})

export interface ClaimWrite {
  readonly deliveryId: string
  readonly webhookId: string
  readonly round: number
  readonly attempt: number
  /** `pending` for an attempt about to be made; `dead_letter` for an abandoned one. */
  readonly status: "pending" | "dead_letter"
  readonly error: string | null
}

/**
 * Writes the attempt row (and the delivery's status) if the delivery is still in that round and
 * not finished, and no row for this attempt exists; closes a previous attempt left pending by a
 * dispatcher that died. Returns the new row's id, or null when another claim won.
 */
export const writeClaim = Effect.fn("DeliveryStore.writeClaim")(function*(claim: ClaimWrite) {
  const sql = yield* SqlClient.SqlClient
  const attemptId = makeId("attempt")
  const rows = yield* sql<{ id: string }>`
    WITH d AS (
      SELECT id FROM webhook_deliveries
      WHERE id = ${claim.deliveryId} AND round = ${claim.round}::int AND status IN ('pending', 'failed')
      FOR UPDATE
    ), ins AS (
      INSERT INTO webhook_attempts (id, delivery_id, webhook_id, round, attempt, status, error)
      SELECT ${attemptId}, d.id, ${claim.webhookId}, ${claim.round}::int, ${claim.attempt}::int, ${claim.status}, ${claim.error}::text FROM d
      ON CONFLICT (delivery_id, round, attempt) DO NOTHING
      RETURNING id, delivery_id
    ), upd AS (
      UPDATE webhook_deliveries SET status = ${claim.status}, updated_at = now()
      WHERE id IN (SELECT delivery_id FROM ins)
    ), prev AS (
      UPDATE webhook_attempts SET status = 'failed', error = ${LOST_ATTEMPT_ERROR}, next_attempt_at = now()
      WHERE delivery_id IN (SELECT delivery_id FROM ins) AND round = ${claim.round}::int
        AND attempt < ${claim.attempt}::int AND status = 'pending'
    )
    SELECT id FROM ins`
  return rows[0]?.id ?? null
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

/** Records an attempt's result on its row and moves the delivery (only if still this round). */
export const writeResult = Effect.fn("DeliveryStore.writeResult")(function*(result: ResultWrite) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    WITH a AS (
      UPDATE webhook_attempts SET
        status = ${result.status}, response_code = ${result.responseCode}::int, error = ${result.error}::text,
        duration_ms = ${result.durationMs}::int,
        next_attempt_at = CASE WHEN ${result.delayMs}::int IS NULL THEN NULL
                               ELSE now() + make_interval(secs => ${result.delayMs}::int / 1000.0) END
      WHERE id = ${result.attemptId} AND status = 'pending'
      RETURNING delivery_id
    )
    UPDATE webhook_deliveries SET status = ${result.status}, updated_at = now()
    WHERE id IN (SELECT delivery_id FROM a) AND round = ${result.round}::int`
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
  const rows = yield* sql<{ id: string }>`
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
  const rows = yield* sql<{ id: string }>`
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
