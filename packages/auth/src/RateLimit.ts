/**
 * Per-credential request rate limit: a token bucket per key or session id, refilled at
 * `SVC_RATE_LIMIT_PER_SECOND` up to `SVC_RATE_LIMIT_BURST`. Buckets live in each API process
 * (so N processes behind a balancer admit up to N times the rate; acceptable for abuse
 * protection, and no request pays a round trip to a shared store).
 */
import { Clock, Context, Effect, Layer, Schedule } from "effect"
import { AuthConfig } from "./AuthConfig.ts"

export interface Bucket {
  readonly tokens: number
  readonly updatedMs: number
}

export interface BucketConfig {
  readonly perSecond: number
  readonly burst: number
}

export type Take =
  | { readonly allowed: true; readonly bucket: Bucket }
  | { readonly allowed: false; readonly bucket: Bucket; readonly retryAfterS: number }

/** Takes one token at `nowMs` (pure). A bucket starts full; time going backwards refills nothing. */
export const take = (bucket: Bucket | undefined, nowMs: number, config: BucketConfig): Take => {
  const capacity = Math.max(1, config.burst)
  const start = bucket ?? { tokens: capacity, updatedMs: nowMs }
  const elapsed = Math.max(0, nowMs - start.updatedMs)
  const tokens = Math.min(capacity, start.tokens + (elapsed / 1000) * config.perSecond)
  const updatedMs = Math.max(nowMs, start.updatedMs)
  if (tokens >= 1) return { allowed: true, bucket: { tokens: tokens - 1, updatedMs } }
  const retryAfterS = Math.max(1, Math.ceil((1 - tokens) / config.perSecond))
  return { allowed: false, bucket: { tokens, updatedMs }, retryAfterS }
}

export class RateLimiter extends Context.Service<RateLimiter, {
  /** Takes a token for the credential; `retryAfterS` when refused. Synchronous (the hot path). */
  readonly take: (credentialId: string, nowMs: number) => { readonly allowed: true } | {
    readonly allowed: false
    readonly retryAfterS: number
  }
}>()("@svc/auth/RateLimiter") {
  static readonly layer = Layer.effect(
    RateLimiter,
    Effect.gen(function*() {
      const config = yield* AuthConfig
      const bucketConfig = { perSecond: config.rateLimitPerSecond, burst: config.rateLimitBurst }
      const buckets = new Map<string, Bucket>()
      const fullAfterMs = (bucketConfig.burst / bucketConfig.perSecond) * 1000

      // A bucket that has refilled completely is the same as no bucket: forget it.
      yield* Effect.map(Clock.currentTimeMillis, (now) => {
        for (const [id, b] of buckets) if (now - b.updatedMs > fullAfterMs) buckets.delete(id)
      }).pipe(Effect.repeat(Schedule.spaced("1 minute")), Effect.forkScoped)

      return RateLimiter.of({
        take: (credentialId, nowMs) => {
          const result = take(buckets.get(credentialId), nowMs, bucketConfig)
          buckets.set(credentialId, result.bucket)
          return result.allowed ? { allowed: true } : { allowed: false, retryAfterS: result.retryAfterS }
        }
      })
    })
  )
}
