/**
 * Rate limits, each a token bucket per key, held in each API process (so N processes behind a
 * balancer admit up to N times the rate; acceptable for abuse protection, and no request pays a
 * round trip to a shared store):
 * - per credential (key or session id): `SVC_RATE_LIMIT_PER_SECOND` refill up to
 *   `SVC_RATE_LIMIT_BURST`, taken by every authenticated request;
 * - per client address, sign-in and sign-up: `SVC_SIGN_IN_RATE_PER_MINUTE` up to
 *   `SVC_SIGN_IN_RATE_BURST`, taken by every sign-in and sign-up request (each costs a password
 *   hash);
 * - per client address, failed credentials: `SVC_FAILED_AUTH_RATE_PER_MINUTE` up to
 *   `SVC_FAILED_AUTH_RATE_BURST`, taken by every credential that fails; an address with no token
 *   left is refused before its next credential is looked up (`ClientAddress.rateKey` names the
 *   address; IPv6 by /64).
 * A refusal is 429 `rate_limited` with `Retry-After`.
 */
import { Clock, Context, Effect, Layer, Schedule } from "effect"
import { AuthConfig } from "./Config.ts"

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

/** The bucket's tokens at `nowMs` (pure). A bucket starts full; time going backwards refills nothing. */
const refill = (bucket: Bucket | undefined, nowMs: number, config: BucketConfig): Bucket => {
  const capacity = Math.max(1, config.burst)
  const start = bucket ?? { tokens: capacity, updatedMs: nowMs }
  const elapsed = Math.max(0, nowMs - start.updatedMs)
  return {
    tokens: Math.min(capacity, start.tokens + (elapsed / 1000) * config.perSecond),
    updatedMs: Math.max(nowMs, start.updatedMs)
  }
}

const retryAfter = (tokens: number, config: BucketConfig) => Math.max(1, Math.ceil((1 - tokens) / config.perSecond))

/** Takes one token at `nowMs` (pure). */
export const take = (bucket: Bucket | undefined, nowMs: number, config: BucketConfig): Take => {
  const { tokens, updatedMs } = refill(bucket, nowMs, config)
  if (tokens >= 1) return { allowed: true, bucket: { tokens: tokens - 1, updatedMs } }
  return { allowed: false, bucket: { tokens, updatedMs }, retryAfterS: retryAfter(tokens, config) }
}

/** Seconds until the bucket has a token again, or undefined when it has one now (pure, takes nothing). */
export const waitFor = (bucket: Bucket | undefined, nowMs: number, config: BucketConfig): number | undefined => {
  const { tokens } = refill(bucket, nowMs, config)
  return tokens >= 1 ? undefined : retryAfter(tokens, config)
}

export type Admission = { readonly allowed: true } | { readonly allowed: false; readonly retryAfterS: number }

const ALLOWED: Admission = { allowed: true }

/** Most buckets a set keeps: past it the oldest is forgotten (it then starts full again). */
const MAX_BUCKETS = 100_000

/** Buckets by key with one configuration; full ones are forgotten every minute. */
const bucketSet = (config: BucketConfig) => {
  const buckets = new Map<string, Bucket>()
  const fullAfterMs = (Math.max(1, config.burst) / config.perSecond) * 1000
  const put = (key: string, bucket: Bucket) => {
    // Re-inserted at the end: Maps iterate in insertion order, so the first is the stalest.
    buckets.delete(key)
    if (buckets.size >= MAX_BUCKETS) {
      const oldest = buckets.keys().next()
      if (!oldest.done) buckets.delete(oldest.value)
    }
    buckets.set(key, bucket)
  }
  return {
    take: (key: string, nowMs: number): Admission => {
      const result = take(buckets.get(key), nowMs, config)
      put(key, result.bucket)
      return result.allowed ? ALLOWED : { allowed: false, retryAfterS: result.retryAfterS }
    },
    waitFor: (key: string, nowMs: number): number | undefined => waitFor(buckets.get(key), nowMs, config),
    sweep: (nowMs: number) => {
      for (const [key, b] of buckets) if (nowMs - b.updatedMs > fullAfterMs) buckets.delete(key)
    }
  }
}

export class RateLimiter extends Context.Service<RateLimiter, {
  /** Takes a token for the credential; `retryAfterS` when refused. Synchronous (the hot path). */
  readonly take: (credentialId: string, nowMs: number) => Admission
  /** Takes a sign-in (or sign-up) token of the client address key. */
  readonly signIn: (addressKey: string, nowMs: number) => Admission
  /** Seconds until the address may present a credential again, when its failures used up its bucket. */
  readonly failuresBlock: (addressKey: string, nowMs: number) => number | undefined
  /** Counts a failed credential of the address. */
  readonly failed: (addressKey: string, nowMs: number) => void
}>()("@svc/auth/RateLimiter") {
  static readonly layer = Layer.effect(
    RateLimiter,
    Effect.gen(function*() {
      const config = yield* AuthConfig
      const credentials = bucketSet({ perSecond: config.rateLimitPerSecond, burst: config.rateLimitBurst })
      const signIns = bucketSet({ perSecond: config.signInRatePerMinute / 60, burst: config.signInRateBurst })
      const failures = bucketSet({ perSecond: config.failedAuthRatePerMinute / 60, burst: config.failedAuthRateBurst })

      // A bucket that has refilled completely is the same as no bucket: forget it.
      yield* Effect.map(Clock.currentTimeMillis, (now) => {
        for (const set of [credentials, signIns, failures]) set.sweep(now)
      }).pipe(Effect.repeat(Schedule.spaced("1 minute")), Effect.forkScoped)

      return RateLimiter.of({
        take: credentials.take,
        signIn: signIns.take,
        failuresBlock: failures.waitFor,
        failed: (addressKey, nowMs) => void failures.take(addressKey, nowMs)
      })
    })
  )
}
