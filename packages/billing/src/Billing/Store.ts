/**
 * The billing tables (migration 0500): limits, per-period spend and announcements, and the runs
 * the meter charges. Each function runs on the ambient transaction when there is one.
 */
import * as Rows from "@svc/db/Rows"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { type Pct, type Sent, THRESHOLDS } from "./Thresholds.ts"

const Units = Schema.String.check(Schema.isPattern(/^\d+$/))

const PeriodColumns = Schema.Struct({
  spend_units: Units,
  pcts_sent: Schema.Array(Schema.Literals(THRESHOLDS as [Pct, ...Array<Pct>])),
  alert_sent: Schema.Boolean
})
const periodRows = Rows.decoder("BillingStore.period", PeriodColumns)
const limitRows = Rows.decoder(
  "BillingStore.limits",
  Schema.Struct({ hard_limit_micros: Schema.NullOr(Rows.Int8), alert_micros: Schema.NullOr(Rows.Int8) })
)
const gateRows = Rows.decoder(
  "BillingStore.gate",
  Schema.Struct({ gate_spend_units: Schema.NullOr(Units), gate_hard_limit_micros: Schema.NullOr(Rows.Int8) })
)
const runRows = Rows.decoder(
  "BillingStore.dueRuns",
  Schema.Struct({
    id: Rows.Int8,
    org_id: Schema.String,
    cpu: Schema.Int,
    ram_mb: Schema.Int,
    metered_until: Rows.Timestamptz,
    ended_at: Schema.NullOr(Rows.Timestamptz)
  })
)
const blockedRows = Rows.decoder(
  "BillingStore.blockedRunning",
  Schema.Struct({ id: Schema.String, started_at: Schema.NullOr(Rows.Timestamptz) })
)

export interface PeriodRow {
  readonly spendUnits: bigint
  readonly sent: Sent
}

export interface Limits {
  readonly hardLimitMicros: bigint | null
  readonly alertMicros: bigint | null
}

export interface Run {
  readonly id: bigint
  readonly orgId: string
  readonly cpu: number
  readonly ramMb: number
  readonly meteredUntil: number
  readonly endedAt: number | null
}

const toPeriod = (row: typeof PeriodColumns.Type): PeriodRow => ({
  spendUnits: BigInt(row.spend_units),
  sent: { pcts: row.pcts_sent, alert: row.alert_sent }
})

/** The org's period row, created when missing and locked to the end of the transaction. */
export const lockPeriod = Effect.fnUntraced(function*(orgId: string, periodStart: number) {
  const sql = yield* SqlClient.SqlClient
  const start = new Date(periodStart)
  yield* sql`INSERT INTO billing_periods (org_id, period_start) VALUES (${orgId}, ${start}) ON CONFLICT DO NOTHING`
  const rows = yield* periodRows(sql`
    SELECT spend_units::text AS spend_units, pcts_sent, alert_sent FROM billing_periods
    WHERE org_id = ${orgId} AND period_start = ${start} FOR UPDATE`)
  return toPeriod(rows[0]!)
})

/** The org's period row as it is (nothing spent and nothing sent when there is none). */
export const readPeriod = Effect.fnUntraced(function*(orgId: string, periodStart: number) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* periodRows(sql`
    SELECT spend_units::text AS spend_units, pcts_sent, alert_sent FROM billing_periods
    WHERE org_id = ${orgId} AND period_start = ${new Date(periodStart)}`)
  return rows.length === 0 ? { spendUnits: 0n, sent: { pcts: [], alert: false } } : toPeriod(rows[0]!)
})

/**
 * What the usage gate asks, as items of a SELECT list (`, … AS gate_spend_units, … AS
 * gate_hard_limit_micros`): the period's spend (null without a row) and the hard limit (null
 * without one). `readPeriod` and `readLimits` read the same, in two round trips.
 */
export const gateColumns = (sql: SqlClient.SqlClient, orgId: string, periodStart: number) =>
  sql`, (SELECT spend_units::text FROM billing_periods
         WHERE org_id = ${orgId} AND period_start = ${new Date(periodStart)}) AS gate_spend_units,
        (SELECT hard_limit_micros FROM billing_limits WHERE org_id = ${orgId}) AS gate_hard_limit_micros`

/** The gate's columns of a row: the spend (0 without a period row) and the hard limit. */
export const fromGateRow = (row: unknown) =>
  Effect.map(gateRows(Effect.succeed([row])), ([r]) => ({
    spendUnits: BigInt(r?.gate_spend_units ?? "0"),
    hardLimitMicros: r?.gate_hard_limit_micros ?? null
  }))

/** The gate's question on its own (one statement). */
export const readGate = Effect.fnUntraced(function*(orgId: string, periodStart: number) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql`SELECT 1 AS one ${gateColumns(sql, orgId, periodStart)}`
  return yield* fromGateRow(row)
})

export const savePeriod = Effect.fnUntraced(function*(orgId: string, periodStart: number, row: PeriodRow) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    UPDATE billing_periods SET spend_units = ${row.spendUnits.toString()}::numeric,
      pcts_sent = ${[...row.sent.pcts]}::smallint[], alert_sent = ${row.sent.alert}
    WHERE org_id = ${orgId} AND period_start = ${new Date(periodStart)}`
})

export const readLimits = Effect.fnUntraced(function*(orgId: string) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* limitRows(sql`
    SELECT hard_limit_micros, alert_micros FROM billing_limits WHERE org_id = ${orgId}`)
  const row = rows[0]
  return { hardLimitMicros: row?.hard_limit_micros ?? null, alertMicros: row?.alert_micros ?? null } as Limits
})

export const writeLimits = Effect.fnUntraced(function*(orgId: string, limits: Limits) {
  const sql = yield* SqlClient.SqlClient
  const hard = limits.hardLimitMicros === null ? null : limits.hardLimitMicros.toString()
  const alert = limits.alertMicros === null ? null : limits.alertMicros.toString()
  yield* sql`
    INSERT INTO billing_limits (org_id, hard_limit_micros, alert_micros, updated_at)
    VALUES (${orgId}, ${hard}::bigint, ${alert}::bigint, now())
    ON CONFLICT (org_id) DO UPDATE SET hard_limit_micros = EXCLUDED.hard_limit_micros,
      alert_micros = EXCLUDED.alert_micros, updated_at = now()`
})

/**
 * Runs with time to charge before `now`, locked to the end of the transaction; runs another
 * meter holds are skipped (it charges them).
 */
export const lockDueRuns = Effect.fnUntraced(function*(now: number, batch: number) {
  const sql = yield* SqlClient.SqlClient
  const at = new Date(now)
  const rows = yield* runRows(sql`
    SELECT id, org_id, cpu, ram_mb, metered_until, ended_at FROM billing_runs
    WHERE metered_until < ${at} AND (ended_at IS NULL OR metered_until < ended_at)
    ORDER BY metered_until, id LIMIT ${batch} FOR UPDATE SKIP LOCKED`)
  return rows.map((r): Run => ({
    id: r.id,
    orgId: r.org_id,
    cpu: r.cpu,
    ramMb: r.ram_mb,
    meteredUntil: r.metered_until.getTime(),
    endedAt: r.ended_at === null ? null : r.ended_at.getTime()
  }))
})

/** Moves the runs' watermarks. */
export const advanceRuns = Effect.fnUntraced(function*(runs: ReadonlyArray<{ id: bigint; until: number }>) {
  if (runs.length === 0) return
  const sql = yield* SqlClient.SqlClient
  const ids = runs.map((r) => r.id.toString())
  const untils = runs.map((r) => new Date(r.until).toISOString())
  yield* sql`
    UPDATE billing_runs r SET metered_until = u.until
    FROM unnest(${ids}::bigint[], ${untils}::timestamptz[]) AS u(id, until) WHERE r.id = u.id`
})

/** Running sandboxes of orgs at or over their hard limit in the period starting at `periodStart`. */
export const blockedRunning = Effect.fnUntraced(function*(periodStart: number, batch: number) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* blockedRows(sql`
    SELECT s.id, s.started_at FROM sandboxes s
    JOIN billing_limits l ON l.org_id = s.org_id AND l.hard_limit_micros IS NOT NULL
    LEFT JOIN billing_periods p ON p.org_id = s.org_id AND p.period_start = ${new Date(periodStart)}
    WHERE s.state = 'running' AND floor(COALESCE(p.spend_units, 0) / 1024000) >= l.hard_limit_micros
    LIMIT ${batch}`)
  return rows.map((r) => ({ id: r.id, startedAt: r.started_at === null ? null : r.started_at.getTime() }))
})
