/**
 * The delivery state machine (spec.md 3.2, 6.4), pure: what a dispatcher does with a job it
 * received, and what an attempt's result moves the delivery to. No I/O here; the dispatcher
 * reads the rows, asks these functions, and writes what they say.
 *
 * Attempt N of a job is its N-th JetStream delivery (`deliveryCount`): the server counts, so a
 * dispatcher that dies mid-attempt cannot make the count go backwards, and `max_deliver: 6`
 * stops the ladder even when no dispatcher survives to say so.
 */
import type { AttemptResult } from "./Attempt.ts"
import { afterFailedAttempt, type RetrySchedule } from "./RetrySchedule.ts"

export type DeliveryStatus = "pending" | "succeeded" | "failed" | "dead_letter"
export type AttemptStatus = DeliveryStatus | "retried"

/** What the database says when a job arrives. */
export interface ClaimState {
  /** null: no such delivery (a job without a row: refused). */
  readonly delivery: { readonly status: DeliveryStatus; readonly round: number } | null
  readonly webhook: { readonly enabled: boolean; readonly deleted: boolean }
  /** The highest attempt row of the delivery's current round, if any. */
  readonly lastAttempt: { readonly attempt: number; readonly status: AttemptStatus } | null
}

export type SkipReason = "unknown_delivery" | "stale_round" | "finished" | "duplicate"

export type ClaimDecision =
  /** Nothing to do: ack the job and make no HTTP call. */
  | { readonly _tag: "Skip"; readonly reason: SkipReason }
  /** The webhook is paused or deleted: the delivery becomes dead_letter without an HTTP call. */
  | { readonly _tag: "Abandon"; readonly reason: "paused" | "deleted"; readonly recoverPrevious: boolean }
  /** Make attempt `attempt` now. */
  | { readonly _tag: "Attempt"; readonly recoverPrevious: boolean }

/**
 * `recoverPrevious`: the previous attempt row is still `pending`, i.e. the dispatcher that made
 * it died before recording a result (the job came back after ack_wait): it is closed as failed.
 */
export const decideClaim = (job: { readonly round: number; readonly attempt: number }, state: ClaimState): ClaimDecision => {
  const { delivery, lastAttempt, webhook } = state
  if (delivery === null) return { _tag: "Skip", reason: "unknown_delivery" }
  // A job of an earlier round was superseded by a manual retry (which published its own job).
  if (job.round !== delivery.round) return { _tag: "Skip", reason: "stale_round" }
  if (delivery.status === "succeeded" || delivery.status === "dead_letter") return { _tag: "Skip", reason: "finished" }
  // Another copy of the job (a re-published one) already made this attempt or a later one.
  if (lastAttempt !== null && lastAttempt.attempt >= job.attempt) return { _tag: "Skip", reason: "duplicate" }
  const recoverPrevious = lastAttempt !== null && lastAttempt.status === "pending"
  if (webhook.deleted) return { _tag: "Abandon", reason: "deleted", recoverPrevious }
  if (!webhook.enabled) return { _tag: "Abandon", reason: "paused", recoverPrevious }
  return { _tag: "Attempt", recoverPrevious }
}

export type AttemptOutcome =
  | { readonly _tag: "Succeeded" }
  /** Ack nothing: nak with `delayMs` so that attempt `nextAttempt` comes after the ladder's wait. */
  | { readonly _tag: "Failed"; readonly nextAttempt: number; readonly delayMs: number }
  /** The sixth failure (spec.md 6.4). */
  | { readonly _tag: "DeadLetter" }

export const afterAttempt = (schedule: RetrySchedule, attempt: number, result: Pick<AttemptResult, "outcome">): AttemptOutcome => {
  if (result.outcome === "succeeded") return { _tag: "Succeeded" }
  const next = afterFailedAttempt(schedule, attempt)
  return next._tag === "DeadLetter" ? next : { _tag: "Failed", nextAttempt: next.nextAttempt, delayMs: next.delayMs }
}

/** The status an outcome leaves on the attempt row and on the delivery. */
export const statusOf = (outcome: AttemptOutcome): DeliveryStatus =>
  outcome._tag === "Succeeded" ? "succeeded" : outcome._tag === "Failed" ? "failed" : "dead_letter"

/** Error text of attempts that never got a result. */
export const LOST_ATTEMPT_ERROR = "no result: the dispatcher stopped during the attempt"
export const NOT_ATTEMPTED_PAUSED = "not attempted: the webhook is paused"
export const NOT_ATTEMPTED_DELETED = "not attempted: the webhook was deleted"
export const NOT_ATTEMPTED_LOST = "not attempted: the dispatcher stopped before the attempt"

/**
 * A job the server gave up on (MAX_DELIVERIES advisory: its sixth delivery was never acked),
 * or a last attempt left pending for too long: what to write.
 */
export type LostJobDecision =
  /** The sixth attempt row is pending: its dispatcher died during it. */
  | { readonly _tag: "CloseLastAttempt" }
  /** The sixth delivery never reached an attempt row: add one, dead. */
  | { readonly _tag: "AddDeadRow"; readonly attempt: number }
  | { readonly _tag: "Nothing" }

export const decideLostJob = (
  job: { readonly round: number; readonly deliveries: number },
  state: Pick<ClaimState, "delivery" | "lastAttempt">
): LostJobDecision => {
  const { delivery, lastAttempt } = state
  if (delivery === null || delivery.round !== job.round) return { _tag: "Nothing" }
  if (delivery.status === "succeeded" || delivery.status === "dead_letter") return { _tag: "Nothing" }
  if (lastAttempt !== null && lastAttempt.attempt >= job.deliveries) {
    return lastAttempt.status === "pending" ? { _tag: "CloseLastAttempt" } : { _tag: "Nothing" }
  }
  return { _tag: "AddDeadRow", attempt: Math.min(job.deliveries, 6) }
}
