/**
 * Settings of identity and access, from the environment (defaults in brackets):
 * - `SVC_SESSION_TTL` [7 days]: absolute lifetime of a dashboard session.
 * - `SVC_KEY_CACHE_TTL` [30 seconds]: how long a process trusts a verified key without asking
 *   Postgres again. Revocations are broadcast, so this only bounds what a lost broadcast costs.
 * - `SVC_KEY_LAST_USED_INTERVAL` [5 seconds]: `lastUsedAt` is written in batches this often,
 *   off the request path, so at most once per key per interval.
 * - `SVC_REVOCATION_ACK_TIMEOUT` [500 millis]: how long a DELETE waits for the other API
 *   processes to confirm they dropped the key before it tells them to distrust their caches.
 * - `SVC_RATE_LIMIT_PER_SECOND` [50] and `SVC_RATE_LIMIT_BURST` [100]: the token bucket of each
 *   credential, per API process.
 * - `SVC_SIGN_IN_RATE_PER_MINUTE` [10] and `SVC_SIGN_IN_RATE_BURST` [20]: the token bucket of
 *   sign-in and sign-up requests per client address, per API process.
 * - `SVC_FAILED_AUTH_RATE_PER_MINUTE` [30] and `SVC_FAILED_AUTH_RATE_BURST` [20]: the token
 *   bucket of failed credentials (unknown, malformed, expired or revoked keys, unknown or ended
 *   sessions) per client address, per API process. An address with none left is answered 429
 *   before its next credential is looked up.
 * - `SVC_COOKIE_SECURE` [auto]: `auto` marks the session cookie Secure unless the server
 *   listens on loopback (`SVC_HOST`); `true` or `false` force it.
 */
import { Config, Context, Duration, Effect, Layer, Schema } from "effect"

export interface AuthSettings {
  readonly sessionTtl: Duration.Duration
  readonly keyCacheTtl: Duration.Duration
  readonly lastUsedInterval: Duration.Duration
  readonly revocationAckTimeout: Duration.Duration
  readonly rateLimitPerSecond: number
  readonly rateLimitBurst: number
  /** Sign-in and sign-up requests per client address. */
  readonly signInRatePerMinute: number
  readonly signInRateBurst: number
  /** Failed credentials per client address. */
  readonly failedAuthRatePerMinute: number
  readonly failedAuthRateBurst: number
  readonly cookieSecure: "auto" | boolean
  /** The address the API listens on (for `cookieSecure: "auto"`). */
  readonly listenHost: string
}

export const defaults: AuthSettings = {
  sessionTtl: Duration.days(7),
  keyCacheTtl: Duration.seconds(30),
  lastUsedInterval: Duration.seconds(5),
  revocationAckTimeout: Duration.millis(500),
  rateLimitPerSecond: 50,
  rateLimitBurst: 100,
  signInRatePerMinute: 10,
  signInRateBurst: 20,
  failedAuthRatePerMinute: 30,
  failedAuthRateBurst: 20,
  cookieSecure: "auto",
  listenHost: "127.0.0.1"
}

const positive = (name: string, fallback: number) =>
  Config.schema(Schema.FiniteFromString.check(Schema.isGreaterThan(0)), name).pipe(Config.withDefault(fallback))

export const fromEnv: Config.Config<AuthSettings> = Config.all({
  sessionTtl: Config.Duration("SVC_SESSION_TTL").pipe(Config.withDefault(defaults.sessionTtl)),
  keyCacheTtl: Config.Duration("SVC_KEY_CACHE_TTL").pipe(Config.withDefault(defaults.keyCacheTtl)),
  lastUsedInterval: Config.Duration("SVC_KEY_LAST_USED_INTERVAL").pipe(Config.withDefault(defaults.lastUsedInterval)),
  revocationAckTimeout: Config.Duration("SVC_REVOCATION_ACK_TIMEOUT").pipe(
    Config.withDefault(defaults.revocationAckTimeout)
  ),
  rateLimitPerSecond: positive("SVC_RATE_LIMIT_PER_SECOND", defaults.rateLimitPerSecond),
  rateLimitBurst: positive("SVC_RATE_LIMIT_BURST", defaults.rateLimitBurst),
  signInRatePerMinute: positive("SVC_SIGN_IN_RATE_PER_MINUTE", defaults.signInRatePerMinute),
  signInRateBurst: positive("SVC_SIGN_IN_RATE_BURST", defaults.signInRateBurst),
  failedAuthRatePerMinute: positive("SVC_FAILED_AUTH_RATE_PER_MINUTE", defaults.failedAuthRatePerMinute),
  failedAuthRateBurst: positive("SVC_FAILED_AUTH_RATE_BURST", defaults.failedAuthRateBurst),
  cookieSecure: Config.Literals(["auto", "true", "false"], "SVC_COOKIE_SECURE").pipe(
    Config.withDefault("auto" as const),
    Config.map((s) => (s === "auto" ? "auto" as const : s === "true"))
  ),
  listenHost: Config.String("SVC_HOST").pipe(Config.withDefault(defaults.listenHost))
})

export class AuthConfig extends Context.Service<AuthConfig, AuthSettings>()("@svc/auth/AuthConfig") {
  static readonly layer = Layer.effect(AuthConfig, Effect.map(fromEnv, AuthConfig.of))
  /** Defaults with some settings replaced (tests, benches). */
  static readonly layerWith = (overrides: Partial<AuthSettings>) =>
    Layer.succeed(AuthConfig, AuthConfig.of({ ...defaults, ...overrides }))
}

/** Loopback addresses: the session cookie is not Secure there (plain-HTTP local development). */
export const isLoopbackHost = (host: string): boolean => {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase()
  return h === "localhost" || h === "::1" || /^127(\.\d{1,3}){3}$/.test(h) || h === "::ffff:127.0.0.1"
}

export const cookieSecure = (settings: AuthSettings): boolean =>
  settings.cookieSecure === "auto" ? !isLoopbackHost(settings.listenHost) : settings.cookieSecure

