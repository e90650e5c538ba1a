/**
 * The `Authorization` middleware of every /v1 endpoint (declared in @svc/domain/Api/Auth), in
 * this order:
 * 1. `?token=` is refused (401 `token_in_query_not_allowed`) except on /terminal, where it is
 *    the credential (WebSockets cannot send headers from browsers).
 * 2. `Access.public` endpoints run without a principal; a state-changing one with a foreign
 *    `Origin` is refused (403 `csrf_rejected`: no login CSRF).
 * 3. The credential: `Authorization: Bearer svc_live_...`, else the `client.session_token`
 *    cookie. None, malformed, unknown, expired or revoked: 401 `unauthenticated` with
 *    `WWW-Authenticate: Bearer`. A cookie on a state-changing request needs an `Origin` whose
 *    host is the request's `Host` (403 `csrf_rejected`).
 * 4. The credential's token bucket (429 `rate_limited` with `Retry-After`).
 * 5. The endpoint's access rule (403 `full_access_required` / `insufficient_scope`).
 * Then the endpoint runs with `CurrentPrincipal`.
 */
import { ApiKeys } from "@svc/auth/ApiKeys"
import * as AuthLayer from "@svc/auth/AuthLayer"
import type { AuditContext } from "@svc/auth/Audit"
import { decide, refusal } from "@svc/auth/Authorization"
import { RateLimiter } from "@svc/auth/RateLimit"
import { Sessions } from "@svc/auth/Sessions"
import {
  type AccessRule,
  accessRuleOf,
  Authorization,
  CsrfRejected,
  CurrentPrincipal,
  type Principal,
  SESSION_COOKIE
} from "@svc/domain/Api/Auth"
import * as Errors from "@svc/domain/Errors"
import { Clock, Effect, Layer, Option, Result } from "effect"
import { HttpServerRequest, HttpServerResponse } from "effect/http"
import type { HttpApiEndpoint, HttpApiGroup } from "effect/http-api"
import { SqlError } from "effect/sql"

const TERMINAL_PATH = "/terminal"
const BEARER = /^Bearer[ \t]+([^\s]+)[ \t]*$/i

const pathOf = (url: string) => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

/** The `token` query parameter, if any (also an empty one). */
const queryToken = (url: string): string | undefined => {
  const q = url.indexOf("?")
  if (q === -1) return undefined
  const value = new URLSearchParams(url.slice(q + 1)).get("token")
  return value === null ? undefined : value
}

const isSafe = (method: string) => method === "GET" || method === "HEAD" || method === "OPTIONS"

/** Whether the request's `Origin` names this server (its host equals the request's `Host`). */
export const sameOrigin = (request: HttpServerRequest.HttpServerRequest): boolean => {
  const origin = request.headers["origin"]
  const host = request.headers["host"]
  if (origin === undefined || host === undefined || origin === "null") return false
  try {
    const url = new URL(origin)
    return (url.protocol === "http:" || url.protocol === "https:") && url.host.toLowerCase() === host.toLowerCase()
  } catch {
    return false
  }
}

/** The error response of a refusal, with the headers api.md asks for. */
export const refuse = (error: Errors.ApiError, headers?: Record<string, string>) => {
  const { status, body } = Errors.errorBody(error)
  const extra: Record<string, string> = { ...headers }
  if (status === 401) extra["www-authenticate"] = "Bearer"
  if (error instanceof Errors.RateLimited) extra["retry-after"] = String(error.retry_after_s)
  return HttpServerResponse.jsonUnsafe(body, { status, headers: extra })
}

/** What public endpoints get: using it is a bug (a defect, so a 500), never an anonymous principal. */
const NO_PRINCIPAL: Principal = new Proxy({} as Principal, {
  get: () => {
    throw new Error("CurrentPrincipal is not available on Access.public endpoints")
  }
})

const UNAUTHENTICATED = new Errors.Unauthenticated()
const TOKEN_IN_QUERY = new Errors.TokenInQueryNotAllowed()
const CSRF = new CsrfRejected()
const UNAVAILABLE = new Errors.Unavailable({ error: "Credentials cannot be checked right now; retry" })

/** Database failures are 503 `unavailable` (logged; never their details in the body). */
export const orUnavailable = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, SqlError.SqlError> | Errors.Unavailable, R> =>
  Effect.catch(effect, (error): Effect.Effect<never, Exclude<E, SqlError.SqlError> | Errors.Unavailable> =>
    SqlError.isSqlError(error)
      ? Effect.andThen(Effect.logWarning("database failure", error), Effect.fail(new Errors.Unavailable()))
      : Effect.fail(error as Exclude<E, SqlError.SqlError>))

/** The audit actor, IP and user agent of the current request. */
export const auditContext = (principal: Principal | null, request: HttpServerRequest.HttpServerRequest): AuditContext => ({
  actor: principal === null
    ? { type: "anonymous", id: null }
    : principal.credential.type === "session"
    ? { type: "user", id: principal.user?.id ?? null }
    : { type: "api_key", id: principal.credential.id },
  ip: Option.getOrNull(request.remoteAddress),
  userAgent: request.headers["user-agent"] ?? null
})

/** Rules per endpoint, looked up once (annotations do not change after the Api is built). */
const rules = new WeakMap<object, AccessRule>()
const ruleOf = (group: HttpApiGroup.Top, endpoint: HttpApiEndpoint.Top): AccessRule => {
  let rule = rules.get(endpoint)
  if (rule === undefined) {
    rule = accessRuleOf(group, endpoint) ?? { _tag: "Account" }
    rules.set(endpoint, rule)
  }
  return rule
}

export const AuthorizationMiddleware = Layer.effect(
  Authorization,
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    const sessions = yield* Sessions
    const limiter = yield* RateLimiter
    const clock = yield* Clock.Clock

    /** Rate limit and access rule, then the endpoint with its principal. */
    const admit = <E, R>(
      httpEffect: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>,
      principal: Principal,
      rule: AccessRule,
      method: string
    ) => {
      const taken = limiter.take(principal.credential.id, clock.currentTimeMillisUnsafe())
      if (!taken.allowed) return Effect.succeed(refuse(new Errors.RateLimited({ retry_after_s: taken.retryAfterS })))
      const decision = decide(rule, method, principal.grant)
      if (decision._tag !== "Allowed") return Effect.succeed(refuse(refusal(decision)))
      return Effect.provideService(httpEffect, CurrentPrincipal, principal)
    }

    return Authorization.of({
      bearer: (httpEffect, { endpoint, group }) =>
        Effect.flatMap(Effect.service(HttpServerRequest.HttpServerRequest), (request) => {
          const url = request.url
          const isTerminal = pathOf(url) === TERMINAL_PATH
          const inQuery = queryToken(url)
          if (inQuery !== undefined && !isTerminal) return Effect.succeed(refuse(TOKEN_IN_QUERY))

          const rule = ruleOf(group, endpoint)
          const method = request.method
          if (rule._tag === "Public") {
            if (!isSafe(method) && request.headers["origin"] !== undefined && !sameOrigin(request)) {
              return Effect.succeed(refuse(CSRF))
            }
            return Effect.provideService(httpEffect, CurrentPrincipal, NO_PRINCIPAL)
          }

          let verified: Effect.Effect<Principal, Errors.Unauthenticated | SqlError.SqlError>
          const authorization = request.headers["authorization"]
          if (authorization !== undefined || (isTerminal && inQuery !== undefined)) {
            let token = inQuery
            if (authorization !== undefined) {
              const m = BEARER.exec(authorization)
              if (m === null) return Effect.succeed(refuse(UNAUTHENTICATED))
              token = m[1]!
            }
            // The hot path: a key this process verified recently, no effect to run.
            const cached = keys.cached(token!, clock.currentTimeMillisUnsafe())
            if (cached !== undefined) return admit(httpEffect, cached, rule, method)
            verified = keys.verify(token!)
          } else {
            const cookie = request.cookies[SESSION_COOKIE]
            if (cookie === undefined || cookie === "") return Effect.succeed(refuse(UNAUTHENTICATED))
            if (!isSafe(method) && !sameOrigin(request)) return Effect.succeed(refuse(CSRF))
            verified = sessions.verify(cookie)
          }
          return Effect.flatMap(Effect.result(verified), (result) => {
            if (Result.isSuccess(result)) return admit(httpEffect, result.success, rule, method)
            if (result.failure._tag === "Unauthenticated") return Effect.succeed(refuse(UNAUTHENTICATED))
            return Effect.as(
              Effect.logWarning("credential check failed on the database", result.failure),
              refuse(UNAVAILABLE)
            )
          })
        })
    })
  })
)

/**
 * The middleware with the identity-and-access services it uses, which it also exposes to every
 * handler (`ApiKeys`, `Audit`, ...). Settings from the environment; needs `SqlClient` and `Nats`.
 */
export const AuthorizationLayer = AuthorizationMiddleware.pipe(Layer.provideMerge(AuthLayer.layer))
