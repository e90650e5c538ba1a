/**
 * Settings of identity and access (defaults in brackets; durations as `30s`, see @svc/config):
 * - `SVC_SESSION_TTL` [7d]: absolute lifetime of a dashboard session.
 * - `SVC_KEY_CACHE_TTL` [30s]: how long a process trusts a verified key without asking
 *   Postgres again. Revocations are broadcast, so this only bounds what a lost broadcast costs.
 * - `SVC_KEY_LAST_USED_INTERVAL` [5s]: `lastUsedAt` is written in batches this often,
 *   off the request path, so at most once per key per interval.
 * - `SVC_REVOCATION_ACK_TIMEOUT` [500ms]: how long a DELETE waits for the other API
 *   processes to confirm they dropped the key before it tells them to distrust their caches.
 * - `SVC_RATE_LIMIT_PER_SECOND` [50] and `SVC_RATE_LIMIT_BURST` [100]: the token bucket of each
 *   credential, per API process.
 * - `SVC_SIGN_IN_RATE_PER_MINUTE` [10] and `SVC_SIGN_IN_RATE_BURST` [20]: the token bucket of
 *   sign-in and sign-up requests per client address, per API process.
 * - `SVC_FAILED_AUTH_RATE_PER_MINUTE` [30] and `SVC_FAILED_AUTH_RATE_BURST` [20]: the token
 *   bucket of failed credentials (unknown, malformed, expired or revoked keys, unknown or ended
 *   sessions) per client address, per API process. An address with none left is answered 429
 *   before its next credential is looked up.
 * - `SVC_COOKIE_SECURE` [auto]: `auto` marks the session cookie Secure unless the API listens
 *   on loopback (its listen address is the api role's `SVC_HOST`); `true` or `false` force it.
 * - `SVC_TRUSTED_PROXIES` [empty]: comma-separated addresses or CIDRs of the reverse proxies in
 *   front of the API (ClientAddress.ts); a bad entry fails start-up.
 */
import * as Env from "@svc/config/Env"
import { Config, Context, Duration, Effect, Layer, Schema } from "effect"
import { parseTrustedProxies } from "./ClientAddress.ts"

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
  cookieSecure: "auto"
}

const positive = (name: string, fallback: number) => Env.number(name, fallback, { above: 0 })

export const SessionTtl = Env.duration("SVC_SESSION_TTL", defaults.sessionTtl)
export const KeyCacheTtl = Env.duration("SVC_KEY_CACHE_TTL", defaults.keyCacheTtl)
export const LastUsedInterval = Env.duration("SVC_KEY_LAST_USED_INTERVAL", defaults.lastUsedInterval)
export const RevocationAckTimeout = Env.duration("SVC_REVOCATION_ACK_TIMEOUT", defaults.revocationAckTimeout)
export const RateLimitPerSecond = positive("SVC_RATE_LIMIT_PER_SECOND", defaults.rateLimitPerSecond)
export const RateLimitBurst = positive("SVC_RATE_LIMIT_BURST", defaults.rateLimitBurst)
export const SignInRatePerMinute = positive("SVC_SIGN_IN_RATE_PER_MINUTE", defaults.signInRatePerMinute)
export const SignInRateBurst = positive("SVC_SIGN_IN_RATE_BURST", defaults.signInRateBurst)
export const FailedAuthRatePerMinute = positive("SVC_FAILED_AUTH_RATE_PER_MINUTE", defaults.failedAuthRatePerMinute)
export const FailedAuthRateBurst = positive("SVC_FAILED_AUTH_RATE_BURST", defaults.failedAuthRateBurst)
export const CookieSecure = Env.describe(
  Config.Literals(["auto", "true", "false"], "SVC_COOKIE_SECURE").pipe(
    Config.withDefault("auto" as const),
    Config.map((s) => (s === "auto" ? "auto" as const : s === "true"))
  ),
  { name: "SVC_COOKIE_SECURE", default: "`auto`", format: "`auto`, `true` or `false`" }
)

/** `SVC_TRUSTED_PROXIES`: comma-separated addresses or CIDRs; a bad entry fails start-up. */
export const TrustedProxies: Env.Setting<ReadonlyArray<string>> = Env.describe(
  Config.schema(
    Schema.String.check(Schema.makeFilter((text: string) => {
      const parsed = parseTrustedProxies(text)
      return parsed.ok || parsed.message
    }, { expected: "comma-separated addresses or CIDRs" })),
    "SVC_TRUSTED_PROXIES"
  ).pipe(
    Config.withDefault(""),
    Config.map((text) => {
      const parsed = parseTrustedProxies(text)
      return parsed.ok ? parsed.entries : []
    })
  ),
  { name: "SVC_TRUSTED_PROXIES", default: "empty", format: "addresses or CIDRs" }
)

export const AuthSettingsConfig: Config.Config<AuthSettings> = Config.all({
  sessionTtl: SessionTtl,
  keyCacheTtl: KeyCacheTtl,
  lastUsedInterval: LastUsedInterval,
  revocationAckTimeout: RevocationAckTimeout,
  rateLimitPerSecond: RateLimitPerSecond,
  rateLimitBurst: RateLimitBurst,
  signInRatePerMinute: SignInRatePerMinute,
  signInRateBurst: SignInRateBurst,
  failedAuthRatePerMinute: FailedAuthRatePerMinute,
  failedAuthRateBurst: FailedAuthRateBurst,
  cookieSecure: CookieSecure
})

/** What the API reads (`AuthSettingsConfig` and the proxies its middleware trusts). */
export const settings: ReadonlyArray<Env.AnySetting> = [
  SessionTtl,
  KeyCacheTtl,
  LastUsedInterval,
  RevocationAckTimeout,
  RateLimitPerSecond,
  RateLimitBurst,
  SignInRatePerMinute,
  SignInRateBurst,
  FailedAuthRatePerMinute,
  FailedAuthRateBurst,
  CookieSecure,
  TrustedProxies
]

export class AuthConfig extends Context.Service<AuthConfig, AuthSettings>()("@svc/auth/AuthConfig") {
  static readonly layer = Layer.effect(AuthConfig, Effect.map(AuthSettingsConfig, AuthConfig.of))
  /** Defaults with some settings replaced (tests, benches). */
  static readonly layerWith = (overrides: Partial<AuthSettings>) =>
    Layer.succeed(AuthConfig, AuthConfig.of({ ...defaults, ...overrides }))
}

/** Loopback addresses: the session cookie is not Secure there (plain-HTTP local development). */
export const isLoopbackHost = (host: string): boolean => {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase()
  return h === "localhost" || h === "::1" || /^127(\.\d{1,3}){3}$/.test(h) || h === "::ffff:127.0.0.1"
}

/** Whether the session cookie is Secure for an API listening on `listenHost`. */
export const cookieSecure = (settings: AuthSettings, listenHost: string): boolean =>
  settings.cookieSecure === "auto" ? !isLoopbackHost(listenHost) : settings.cookieSecure
