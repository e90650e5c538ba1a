/**
 * A sandbox's lifecycle settings (docs/contract.md#lifecycle-timeouts-idleness-resume): its
 * lifetime, its idleness, what either does, how long a stopped one is kept, whether a call
 * starts a stopped one, and why it last stopped.
 */
import { Schema } from "effect"

/** Why a sandbox last stopped (`stop_reason`, and `reason` of `sandbox.state_updated`). */
export const STOP_REASONS = ["user", "timeout", "idle", "oom", "host_lost", "usage_limit", "error"] as const
export const StopReason = Schema.Literals(STOP_REASONS)
export type StopReason = typeof StopReason.Type

/** What a `timeout_s` or an `idle_timeout_s` does. */
export const OnTimeout = Schema.Literals(["stop", "delete"])
export type OnTimeout = typeof OnTimeout.Type

/** `timeout_s`, `idle_timeout_s` and `auto_delete_s`: 1 s to 30 days. */
export const LIFECYCLE_S_MIN = 1
export const LIFECYCLE_S_MAX = 30 * 24 * 3600

export const LifecycleSeconds = Schema.Int.check(
  Schema.isBetween({ minimum: LIFECYCLE_S_MIN, maximum: LIFECYCLE_S_MAX })
)

/**
 * Body of PUT /v1/sandboxes/{id}/timeout: a field left out is left as it is, `null` removes it,
 * a number sets it and (for `timeout_s`) counts it again from now.
 */
export const SetTimeoutRequest = Schema.Struct({
  timeout_s: Schema.optionalKey(Schema.NullOr(LifecycleSeconds)),
  idle_timeout_s: Schema.optionalKey(Schema.NullOr(LifecycleSeconds))
})
export type SetTimeoutRequest = typeof SetTimeoutRequest.Type
