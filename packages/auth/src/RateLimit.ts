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
 *
 * Every answer reports the bucket that last decided its request in the IETF draft's fields
 * (draft-ietf-httpapi-ratelimit-headers): `RateLimit-Limit` (the burst), `RateLimit-Remaining`
 * (whole tokens left) and `RateLimit-Reset` (seconds until the bucket is full again). The limiter
 * notes that bucket against the request's fiber as it takes from it (`quotaOf` reads it back, the
 * global middleware sets the headers): no request-scoped service to thread through the
 * Authorization middleware and the sign-in handlers. An answer no bucket decided (a public route,
 * no credential at all) reports its client address's failed-credential bucket, the limit an
 * unauthenticated client meets (`addressQuota`).
 */
import { Clock, Context, Effect, Fiber, Layer, Schedule } from "effect"
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

/** What an answer reports of a bucket (`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`). */
export interface Quota {
  readonly limit: number
  readonly remaining: number
  readonly resetS: number
}

/** The bucket's quota at `nowMs` (pure, takes nothing). */
export const quota = (bucket: Bucket | undefined, nowMs: number, config: BucketConfig): Quota => {
  const capacity = Math.max(1, config.burst)
  const { tokens } = refill(bucket, nowMs, config)
  return {
    limit: capacity,
    remaining: Math.floor(tokens),
    resetS: Math.max(0, Math.ceil((capacity - tokens) / config.perSecond))
  }
}

export type Admission = { readonly allowed: true } | { readonly allowed: false; readonly retryAfterS: number }

const ALLOWED: Admission = { allowed: true }

/** Most buckets a set keeps: past it the oldest is forgotten (it then starts full again). */
const MAX_BUCKETS = 100_000

/**
 * The quota of the bucket each fiber (each request) last took from or looked at. A fiber is one
 * request's; its entry goes with it (weak), or when the middleware reads it.
 */
type Notes = WeakMap<Fiber.Fiber<unknown, unknown>, Quota>

const note = (notes: Notes, bucket: Bucket | undefined, nowMs: number, config: BucketConfig) => {
  const fiber = Fiber.getCurrent()
  if (fiber !== undefined) notes.set(fiber, quota(bucket, nowMs, config))
}

/** Buckets by key with one configuration; full ones are forgotten every minute. */
const bucketSet = (config: BucketConfig, notes: Notes) => {
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
      note(notes, result.bucket, nowMs, config)
      return result.allowed ? ALLOWED : { allowed: false, retryAfterS: result.retryAfterS }
    },
    waitFor: (key: string, nowMs: number): number | undefined => {
      const bucket = buckets.get(key)
      note(notes, bucket, nowMs, config)
      return waitFor(bucket, nowMs, config)
    },
    quota: (key: string, nowMs: number): Quota => quota(buckets.get(key), nowMs, config),
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
  /** The quota of the bucket the current fiber (request) last took from or looked at, forgotten as it is read. */
  readonly quotaOf: (fiber: Fiber.Fiber<unknown, unknown>) => Quota | undefined
  /** The address's failed-credential quota (takes nothing): what an answer no bucket decided reports. */
  readonly addressQuota: (addressKey: string, nowMs: number) => Quota
}>()("@svc/auth/RateLimiter") {
  static readonly layer = Layer.effect(
    RateLimiter,
    Effect.gen(function*() {
      const config = yield* AuthConfig
      const notes: Notes = new WeakMap()
      const credentials = bucketSet({ perSecond: config.rateLimitPerSecond, burst: config.rateLimitBurst }, notes)
      const signIns = bucketSet({ perSecond: config.signInRatePerMinute / 60, burst: config.signInRateBurst }, notes)
      const failures = bucketSet(
        { perSecond: config.failedAuthRatePerMinute / 60, burst: config.failedAuthRateBurst },
        notes
      )

      // A bucket that has refilled completely is the same as no bucket: forget it.
      yield* Effect.map(Clock.currentTimeMillis, (now) => {
        for (const set of [credentials, signIns, failures]) set.sweep(now)
      }).pipe(Effect.repeat(Schedule.spaced("1 minute")), Effect.forkScoped)

      return RateLimiter.of({
        take: credentials.take,
        signIn: signIns.take,
        failuresBlock: failures.waitFor,
        failed: (addressKey, nowMs) => void failures.take(addressKey, nowMs),
        quotaOf: (fiber) => {
          const noted = notes.get(fiber)
          if (noted !== undefined) notes.delete(fiber)
          return noted
        },
        addressQuota: failures.quota
      })
    })
  )
}
