/**
 * A webhook's deliveries and their attempts, read straight from the database: what the webhook
 * tests of several packages (packages/webhooks, apps/dispatcher) assert on.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export interface AttemptRowView {
  readonly round: number
  readonly attempt: number
  readonly status: string
  readonly response_code: number | null
  readonly error: string | null
  readonly duration_ms: number | null
  readonly created_at: Date
  readonly next_attempt_at: Date | null
}

/** A delivery's attempt rows in order, straight from the database. */
export const attemptRows = (deliveryId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql<AttemptRowView>`
      SELECT round, attempt, status, response_code, error, duration_ms, created_at, next_attempt_at
      FROM webhook_attempts WHERE delivery_id = ${deliveryId} ORDER BY round, attempt`
  }).pipe(Effect.orDie)

export const deliveryStatus = (deliveryId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<
      { status: string; round: number }
    >`SELECT status, round FROM webhook_deliveries WHERE id = ${deliveryId}`
    return rows[0] ?? null
  }).pipe(Effect.orDie)

export const deliveriesOf = (webhookId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql<{ id: string; event: string; status: string; event_msg_id: string }>`
      SELECT id, event, status, event_msg_id FROM webhook_deliveries WHERE webhook_id = ${webhookId} ORDER BY id`
  }).pipe(Effect.orDie)
