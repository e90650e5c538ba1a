/**
 * The delivery state machine (docs/contract.md#delivery-states, #retries), pure: what a dispatcher
 * does with a job it received, and what an attempt's result moves the delivery to. No I/O here; the
 * dispatcher reads the rows, asks these functions, and writes what they say.
 *
 * Attempts are numbered by the database (the round's rows), not by JetStream's delivery count;
 * `max_deliver: 6` on the consumer still stops a job when no dispatcher survives to say so.
 */
import type { AttemptStatus, DeliveryStatus } from "@svc/domain/Webhook"
import type { AttemptResult } from "./Attempt.ts"
import { afterFailedAttempt, MAX_ATTEMPTS, type RetrySchedule } from "./RetrySchedule.ts"

/** What the database says when a job arrives. */
export interface ClaimState {
  /** null: no such delivery (a job without a row: refused). */
  readonly delivery: {
    readonly status: DeliveryStatus
    readonly round: number
    /** The stream sequence of the job that carries this round, once one was seen. */
    readonly jobSeq: number | null
  } | null
  readonly webhook: { readonly enabled: boolean; readonly deleted: boolean }
  /** The highest attempt row of the delivery's current round, if any. */
  readonly lastAttempt: { readonly attempt: number; readonly status: AttemptStatus } | null
}

/** A job as received. */
export interface ClaimJob {
  readonly round: number
  /** The job message's stream sequence. */
  readonly jobSeq: number
  /** The call was already made (the first attempt's fast path): this records it. */
  readonly made: boolean
}

export type SkipReason = "unknown_delivery" | "stale_round" | "finished" | "duplicate"

export type ClaimDecision =
  /** Nothing to do: ack the job and make no HTTP call. */
  | { readonly _tag: "Skip"; readonly reason: SkipReason }
  /** No call: the delivery becomes dead_letter with a row for `attempt` saying why. */
  | {
    readonly _tag: "Abandon"
    readonly reason: "paused" | "deleted"
    readonly attempt: number
    readonly recoverPrevious: boolean
  }
  /**
   * The sixth attempt's row is still pending (its dispatcher died) and the job came back once
   * more: no seventh attempt; the sixth is closed dead and so is the delivery.
   */
  | { readonly _tag: "Exhausted" }
  /** Make attempt `attempt` now (or, when the job says `made`, record the call as that attempt). */
  | { readonly _tag: "Attempt"; readonly attempt: number; readonly recoverPrevious: boolean }

/**
 * The attempt number is the database's: one more than the round's highest row. JetStream's
 * delivery count is not used: server 2.9.10 was seen re-delivering a killed dispatcher's job
 * with count 1 (trusting it dropped the job as a copy of the attempt already made), and a job
 * fetched but never called comes back with a higher count (trusting that would skip rungs of
 * the ladder). A first attempt cut short by a crash leaves no row (fast path: its row is
 * written with its result); one claimed before its call left a `pending` row.
 * `recoverPrevious`: the highest row is still `pending`, i.e. the dispatcher that made it died
 * before recording a result (the job came back after ack_wait): it is closed as failed.
 * A job whose sequence is not the one that carries the round is a second copy: skipped.
 */
export const decideClaim = (job: ClaimJob, state: ClaimState): ClaimDecision => {
  const { delivery, lastAttempt, webhook } = state
  if (delivery === null) return { _tag: "Skip", reason: "unknown_delivery" }
  // A job of an earlier round was superseded by a manual retry (which published its own job).
  if (job.round !== delivery.round) return { _tag: "Skip", reason: "stale_round" }
  if (delivery.status === "succeeded" || delivery.status === "dead_letter") return { _tag: "Skip", reason: "finished" }
  if (delivery.jobSeq !== null && delivery.jobSeq !== job.jobSeq) return { _tag: "Skip", reason: "duplicate" }
  const attempt = (lastAttempt?.attempt ?? 0) + 1
  const recoverPrevious = lastAttempt !== null && lastAttempt.status === "pending"
  if (attempt > MAX_ATTEMPTS) return { _tag: "Exhausted" }
  // A call already made is recorded whatever the webhook's state became meanwhile.
  if (!job.made) {
    if (webhook.deleted) return { _tag: "Abandon", reason: "deleted", attempt, recoverPrevious }
    if (!webhook.enabled) return { _tag: "Abandon", reason: "paused", attempt, recoverPrevious }
  }
  return { _tag: "Attempt", attempt, recoverPrevious }
}

/**
 * Whether a job's first attempt may be made before any statement, its row written afterwards
 * with its result (decideClaim with `made`): the job carries the event and body, JetStream says
 * it is the first delivery (a hint only: numbering is the rows'), and the webhook is live in
 * this dispatcher's memory, in a copy at least as new as the one the fan-out matched the event to
 * (so a url changed just before never gets the call). Anything else is claimed first, under the
 * delivery's row lock.
 */
export const firstAttemptFastPath = (
  job: { readonly deliveryCount: number; readonly carriesBody: boolean; readonly webhookVersion: number | undefined },
  webhook: { readonly enabled: boolean; readonly version: number } | undefined
): boolean =>
  job.deliveryCount === 1 && job.carriesBody && webhook !== undefined && webhook.enabled &&
  // The dispatcher's copy of the webhook is at least as new as the one the event was matched to.
  job.webhookVersion !== undefined && webhook.version >= job.webhookVersion

export type AttemptOutcome =
  | { readonly _tag: "Succeeded" }
  /** Ack nothing: nak with `delayMs` so that attempt `nextAttempt` comes after the ladder's wait. */
  | { readonly _tag: "Failed"; readonly nextAttempt: number; readonly delayMs: number }
  /** The sixth failure (docs/contract.md#retries). */
  | { readonly _tag: "DeadLetter" }

export const afterAttempt = (
  schedule: RetrySchedule,
  attempt: number,
  result: Pick<AttemptResult, "outcome">
): AttemptOutcome => {
  if (result.outcome === "succeeded") return { _tag: "Succeeded" }
  const next = afterFailedAttempt(schedule, attempt)
  return next._tag === "DeadLetter" ? next : { _tag: "Failed", nextAttempt: next.nextAttempt, delayMs: next.delayMs }
}

/** The status an outcome leaves on the attempt row and on the delivery. */
export const deliveryStatusOf = (outcome: AttemptOutcome): DeliveryStatus =>
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
  /** The highest attempt row is pending: its dispatcher died during it. */
  | { readonly _tag: "CloseLastAttempt" }
  /** The job's last delivery never reached an attempt row: add the next one, dead. */
  | { readonly _tag: "AddDeadRow"; readonly attempt: number }
  | { readonly _tag: "Nothing" }

export const decideLostJob = (
  job: { readonly round: number; readonly deliveries: number },
  state: Pick<ClaimState, "delivery" | "lastAttempt">
): LostJobDecision => {
  const { delivery, lastAttempt } = state
  if (delivery === null || delivery.round !== job.round) return { _tag: "Nothing" }
  if (delivery.status === "succeeded" || delivery.status === "dead_letter") return { _tag: "Nothing" }
  if (lastAttempt !== null && lastAttempt.status === "pending") return { _tag: "CloseLastAttempt" }
  return { _tag: "AddDeadRow", attempt: Math.min((lastAttempt?.attempt ?? 0) + 1, MAX_ATTEMPTS) }
}
