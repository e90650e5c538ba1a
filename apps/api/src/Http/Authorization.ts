/**
 * The `Authorization` middleware of every /v1 endpoint (declared in @svc/domain/Api/Auth), in
 * this order:
 * 1. `?token=` is refused (401 `token_in_query_not_allowed`) except on /terminal, where it is
 *    the credential (WebSockets cannot send headers from browsers). The global middleware
 *    refuses it first on every other path; this keeps endpoints safe wherever they are served.
 * 2. `Access.public` endpoints run without a principal; a state-changing one with a foreign
 *    `Origin` is refused (403 `csrf_rejected`: no login CSRF).
 * 3. The credential: `Authorization: Bearer svc_live_...`, else the `client.session_token`
 *    cookie. None, malformed, unknown, expired or revoked: 401 `unauthenticated` with
 *    `WWW-Authenticate: Bearer`. A cookie on a state-changing request needs an `Origin` whose
 *    host is the request's `Host` (403 `csrf_rejected`). A credential this process has not
 *    verified recently is only looked up while the client address has failures left
 *    (`SVC_FAILED_AUTH_RATE_*`, 429 `rate_limited` with `Retry-After` otherwise); each one
 *    that fails takes one.
 * 4. The credential's token bucket (429 `rate_limited` with `Retry-After`).
 * 5. The endpoint's access rule (403 `full_access_required` / `insufficient_scope`).
 * 6. A JSON body nesting deeper than `MAX_JSON_DEPTH` is 400 `invalid_request` before the
 *    endpoint decodes it (recursive decoding never sees it).
 * Then the endpoint runs with `CurrentPrincipal`.
 */
import { ApiKeys } from "@svc/auth/ApiKeys"
import type { AuditContext } from "@svc/auth/Audit"
import * as AuthLayer from "@svc/auth/AuthLayer"
import { decide, refusal } from "@svc/auth/Authorization"
import { rateKey } from "@svc/auth/ClientAddress"
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
import type { InfrastructureFailure } from "@svc/domain/Api/Infrastructure"
import * as Errors from "@svc/domain/Errors"
import { jsonNestsDeeperThan, MAX_JSON_DEPTH } from "@svc/domain/Text"
import { Cause, Clock, Effect, Layer, Option, Result, type Types } from "effect"
import { HttpServerRequest, HttpServerResponse } from "effect/http"
import type { HttpApiEndpoint, HttpApiGroup } from "effect/http-api"
import { pathOf, queryToken, renderCause, TERMINAL_PATH } from "./Middleware.ts"

export const BEARER = /^Bearer[ \t]+([^\s]+)[ \t]*$/i

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

/** The error response of a refusal, with the headers docs/contract.md#errors asks for. */
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

export const UNAUTHENTICATED = new Errors.Unauthenticated()
const TOKEN_IN_QUERY = new Errors.TokenInQueryNotAllowed()
const CSRF = new CsrfRejected()

/** The audit actor, IP and user agent of the current request. */
export const auditContext = (
  principal: Principal | null,
  request: HttpServerRequest.HttpServerRequest
): AuditContext => ({
  actor: principal === null
    ? { type: "anonymous", id: null }
    : principal.credential.type === "session"
    ? { type: "user", id: principal.user?.id ?? null }
    : { type: "api_key", id: principal.credential.id },
  ip: Option.getOrNull(request.remoteAddress),
  userAgent: request.headers["user-agent"] ?? null
})

/** Whether the endpoint decodes a JSON body from this request (the content type it names, JSON by default). */
const jsonEndpoints = new WeakMap<object, boolean>()
const takesJson = (endpoint: HttpApiEndpoint.Top, request: HttpServerRequest.HttpServerRequest): boolean => {
  let json = jsonEndpoints.get(endpoint)
  if (json === undefined) {
    const decoder = endpoint.payload.get("application/json")
    json = decoder !== undefined && decoder.encoding._tag === "Json"
    jsonEndpoints.set(endpoint, json)
  }
  if (!json || isSafe(request.method)) return false
  const type = (request.headers["content-type"] ?? "application/json").split(";")[0]!.trim().toLowerCase()
  return type === "application/json"
}

const TOO_DEEP = new Errors.InvalidRequest({
  error: `JSON bodies may nest at most ${MAX_JSON_DEPTH} levels deep`,
  issues: [{ path: "", message: `nested deeper than ${MAX_JSON_DEPTH} levels` }]
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

    /** Counts a failed credential of the address, then answers 401. */
    const failed = (addressKey: string) => {
      limiter.failed(addressKey, clock.currentTimeMillisUnsafe())
      return Effect.succeed(refuse(UNAUTHENTICATED))
    }

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

    /** The endpoint, once a JSON body it is about to decode is known not to nest too deep. */
    const guarded = <E, R>(
      httpEffect: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>,
      endpoint: HttpApiEndpoint.Top,
      request: HttpServerRequest.HttpServerRequest
    ) =>
      takesJson(endpoint, request)
        ? Effect.matchEffect(request.text, {
          // Too large or cut short: the answer the endpoint's own read would have got.
          onFailure: (error) => renderCause(Cause.fail(error)),
          onSuccess: (text) => jsonNestsDeeperThan(text, MAX_JSON_DEPTH) ? Effect.succeed(refuse(TOO_DEEP)) : httpEffect
        })
        : httpEffect

    return Authorization.of(
      (httpEffect, { endpoint, group }) =>
        Effect.flatMap(Effect.service(HttpServerRequest.HttpServerRequest), (request) => {
          const url = request.url
          const isTerminal = pathOf(url) === TERMINAL_PATH
          const inQuery = queryToken(url)
          if (inQuery !== undefined && !isTerminal) return Effect.succeed(refuse(TOKEN_IN_QUERY))

          const rule = ruleOf(group, endpoint)
          const method = request.method
          const endpointEffect = guarded(httpEffect, endpoint, request)
          if (rule._tag === "Public") {
            if (!isSafe(method) && request.headers["origin"] !== undefined && !sameOrigin(request)) {
              return Effect.succeed(refuse(CSRF))
            }
            return Effect.provideService(endpointEffect, CurrentPrincipal, NO_PRINCIPAL)
          }

          // Only credentials that are not in the cache need it: computed then.
          const addressKey = () => rateKey(Option.getOrUndefined(request.remoteAddress))
          /** A credential about to be looked up: refused outright while the address has no failures left. */
          const blocked = () => {
            const wait = limiter.failuresBlock(addressKey(), clock.currentTimeMillisUnsafe())
            return wait === undefined ? undefined : refuse(
              new Errors.RateLimited({
                error: "Too many failed credentials from this address; retry later",
                retry_after_s: wait
              })
            )
          }
          let verified: Effect.Effect<Principal, Errors.Unauthenticated | InfrastructureFailure>
          const authorization = request.headers["authorization"]
          if (authorization !== undefined || (isTerminal && inQuery !== undefined)) {
            let token = inQuery
            if (authorization !== undefined) {
              const m = BEARER.exec(authorization)
              if (m === null) {
                // Malformed (another scheme, garbage): a failed credential like an unknown key.
                const refused = blocked()
                return refused !== undefined ? Effect.succeed(refused) : failed(addressKey())
              }
              token = m[1]!
            }
            // The hot path: a key this process verified recently, no effect to run.
            const cached = keys.cached(token!, clock.currentTimeMillisUnsafe())
            if (cached !== undefined) return admit(endpointEffect, cached, rule, method)
            const refused = blocked()
            if (refused !== undefined) return Effect.succeed(refused)
            verified = keys.verify(token!)
          } else {
            const cookie = request.cookies[SESSION_COOKIE]
            if (cookie === undefined || cookie === "") return Effect.succeed(refuse(UNAUTHENTICATED))
            if (!isSafe(method) && !sameOrigin(request)) return Effect.succeed(refuse(CSRF))
            const refused = blocked()
            if (refused !== undefined) return Effect.succeed(refused)
            verified = sessions.verify(cookie)
          }
          return Effect.flatMap(Effect.result(verified), (result): Effect.Effect<
            HttpServerResponse.HttpServerResponse,
            Types.unhandled | InfrastructureFailure
          > => {
            if (Result.isSuccess(result)) return admit(endpointEffect, result.success, rule, method)
            if (result.failure._tag === "Unauthenticated") return failed(addressKey())
            // The credential could not be checked: the Infrastructure middleware answers.
            return Effect.fail(result.failure)
          })
        })
    )
  })
)

/**
 * The middleware with the identity-and-access services it uses, which it also exposes to every
 * handler (`ApiKeys`, `Audit`, ...). Settings from the environment; needs `SqlClient` and `Nats`.
 */
export const AuthorizationLayer = AuthorizationMiddleware.pipe(Layer.provideMerge(AuthLayer.layer))
