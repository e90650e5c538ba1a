/**
 * Per-account sign-in backoff: repeated wrong passwords for one email slow its sign-ins down,
 * whichever addresses they come from (the per-address limit of `RateLimit.ts` does not see a
 * guesser spread over many addresses).
 *
 * - The first `FREE_FAILURES` (5) failures of a streak cost nothing. From the fifth on, each
 *   failure blocks the email for 1 s, then 2, 4, ... up to 15 minutes: a guesser gets about 100
 *   tries a day per account, a person who mistyped waits seconds.
 * - While blocked, every sign-in of the email is 429 `rate_limited` with `Retry-After`, the right
 *   password too (otherwise the answer would tell a right guess from a wrong one at full speed),
 *   and nothing is checked, written or audited.
 * - A successful sign-in ends the streak; so do 24 h without a failure.
 * - Unknown emails get the same treatment (the backoff must not tell which emails have an
 *   account). State is in Postgres (`sign_in_failures`, keyed by the SHA-256 of the email), so
 *   every API process sees the same streak.
 * - Audit: a known account's failure writes `auth.sign_in_failed` for the first five of a streak
 *   and then at the 10th, 20th, 40th...: at most 5 + log2(n / 5) rows for n failures, not one per
 *   failure forever.
 */
import * as Rows from "@svc/db/Rows"
import { formatTimestamp } from "@svc/domain/Time"
import { Effect, Schema } from "effect"
import type { SqlClient } from "effect/sql"
import { createHash } from "node:crypto"

export const FREE_FAILURES = 5
export const MAX_BLOCK_MS = 15 * 60_000
export const STREAK_RESET_MS = 24 * 3600_000
const PRUNE_BATCH = 100

/** How long the `failures`-th failure of a streak blocks the email (0: not at all). */
export const blockFor = (failures: number): number =>
  failures < FREE_FAILURES ? 0 : Math.min(MAX_BLOCK_MS, 1000 * 2 ** Math.min(30, failures - FREE_FAILURES))

/** Whether the `failures`-th failure of a streak is written to the audit log. */
export const audited = (failures: number): boolean => {
  if (failures <= FREE_FAILURES) return true
  if (failures % FREE_FAILURES !== 0) return false
  const multiple = failures / FREE_FAILURES
  return (multiple & (multiple - 1)) === 0
}

export const emailKey = (normalizedEmail: string): string =>
  createHash("sha256").update(normalizedEmail, "utf8").digest("hex")

const blockedRows = Rows.decoder("SignInThrottle.blockedUntil", Schema.Struct({ blocked_until: Rows.Timestamptz }))
const failureRows = Rows.decoder("SignInThrottle.recordFailure", Schema.Struct({ failures: Schema.Int }))

/** When the email's sign-ins may resume (ms), if it is blocked at `nowMs`. */
export const blockedUntil = Effect.fnUntraced(function*(sql: SqlClient.SqlClient, key: string, nowMs: number) {
  const rows = yield* blockedRows(sql`
    SELECT blocked_until FROM sign_in_failures
    WHERE email_hash = ${key} AND blocked_until > ${formatTimestamp(nowMs)}::timestamptz`)
  return rows[0]?.blocked_until.getTime()
})

/** Counts a failure of the email's streak (a new streak after 24 h quiet); its number in the streak. */
export const recordFailure = Effect.fnUntraced(function*(sql: SqlClient.SqlClient, key: string, nowMs: number) {
  const now = formatTimestamp(nowMs)
  const rows = yield* failureRows(sql`
    INSERT INTO sign_in_failures (email_hash, failures, last_failure_at)
    VALUES (${key}, 1, ${now}::timestamptz)
    ON CONFLICT (email_hash) DO UPDATE SET
      failures = CASE WHEN sign_in_failures.last_failure_at < ${formatTimestamp(nowMs - STREAK_RESET_MS)}::timestamptz
                      THEN 1 ELSE sign_in_failures.failures + 1 END,
      blocked_until = CASE WHEN sign_in_failures.last_failure_at < ${
    formatTimestamp(nowMs - STREAK_RESET_MS)
  }::timestamptz
                           THEN NULL ELSE sign_in_failures.blocked_until END,
      last_failure_at = ${now}::timestamptz
    RETURNING failures`)
  const failures = rows[0]?.failures ?? 1
  const block = blockFor(failures)
  if (block > 0) {
    // Concurrent failures may finish in any order: the block only ever grows.
    yield* sql`
      UPDATE sign_in_failures SET blocked_until = greatest(blocked_until, ${
      formatTimestamp(nowMs + block)
    }::timestamptz)
      WHERE email_hash = ${key}`
  }
  // Streaks quiet for a day are over: a few at a time, so no failure pays for many.
  yield* sql`
    DELETE FROM sign_in_failures WHERE email_hash IN (
      SELECT email_hash FROM sign_in_failures
      WHERE last_failure_at < ${formatTimestamp(nowMs - STREAK_RESET_MS)}::timestamptz LIMIT ${PRUNE_BATCH})`
  return failures
})

/** A successful sign-in ends the streak. */
export const reset = (sql: SqlClient.SqlClient, key: string) =>
  Effect.asVoid(sql`DELETE FROM sign_in_failures WHERE email_hash = ${key}`)
