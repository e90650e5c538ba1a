/**
 * Handlers of the `auth` and `apiKeys` groups (docs/contract.md#authentication, #api-keys). Sign-in
 * and sign-up are limited per client address (429 `rate_limited` with `Retry-After`), and sign-in
 * per account too (`@svc/auth/Auth/SignInThrottle`).
 */
import { ApiKeys } from "@svc/auth/ApiKeys"
import { rateKey } from "@svc/auth/ClientAddress"
import { AuthConfig, cookieSecure } from "@svc/auth/Config"
import { RateLimiter } from "@svc/auth/RateLimit"
import { Sessions } from "@svc/auth/Sessions"
import { Users } from "@svc/auth/Users"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal, type Principal, SESSION_COOKIE, type WhoAmI } from "@svc/domain/Api/Auth"
import * as Errors from "@svc/domain/Errors"
import { Clock, DateTime, Effect, Layer, Option } from "effect"
import { HttpEffect, type HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { ApiHost } from "../Config.ts"
import { AuditHandlers } from "./Audit.ts"
import { auditContext } from "./Authorization.ts"
import { OrgHandlers } from "./Org.ts"

const whoAmI = (p: Principal): WhoAmI => ({
  org: p.org,
  user: p.user,
  credential: {
    type: p.credential.type,
    id: p.credential.id,
    scopes: p.credential.scopes,
    expiresAt: p.credential.expiresAt
  }
})

export const AuthHandlers = HttpApiBuilder.group(
  Api,
  "auth",
  Effect.fn(function*(handlers) {
    const users = yield* Users
    const sessions = yield* Sessions
    const config = yield* AuthConfig
    const limiter = yield* RateLimiter
    const secure = cookieSecure(config, yield* ApiHost)

    /** Sign-in and sign-up each cost a password hash: a bucket per client address (`SVC_SIGN_IN_RATE_*`). */
    const perAddress = (request: HttpServerRequest.HttpServerRequest) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const taken = limiter.signIn(rateKey(Option.getOrUndefined(request.remoteAddress)), now)
        return taken.allowed ? Effect.void : Effect.fail(
          new Errors.RateLimited({
            error: "Too many sign-in attempts from this address; retry later",
            retry_after_s: taken.retryAfterS
          })
        )
      })

    const setSessionCookie = (token: string, expiresAt: DateTime.Utc) =>
      HttpEffect.appendPreResponseHandler((_request, response) =>
        Effect.succeed(HttpServerResponse.setCookieUnsafe(response, SESSION_COOKIE, token, {
          httpOnly: true,
          sameSite: "lax",
          secure,
          path: "/",
          expires: new Date(DateTime.toEpochMillis(expiresAt))
        }))
      )
    const clearSessionCookie = HttpEffect.appendPreResponseHandler((_request, response) =>
      Effect.succeed(HttpServerResponse.expireCookieUnsafe(response, SESSION_COOKIE, {
        httpOnly: true,
        sameSite: "lax",
        secure,
        path: "/"
      }))
    )

    const startSession = Effect.fnUntraced(function*(
      request: HttpServerRequest.HttpServerRequest,
      signedIn: { readonly user: { readonly id: any }; readonly org: { readonly id: any } }
    ) {
      const context = auditContext(null, request)
      const session = yield* sessions.create(
        { id: signedIn.user.id, orgId: signedIn.org.id },
        { ...context, actor: { type: "user", id: signedIn.user.id } }
      )
      yield* setSessionCookie(session.token, session.expiresAt)
    })

    return handlers
      .handle("signUp", ({ payload, request }) =>
        Effect.gen(function*() {
          yield* perAddress(request)
          const { ip, userAgent } = auditContext(null, request)
          const created = yield* users.signUp(
            { email: payload.email, password: payload.password, orgName: payload.org_name },
            { ip, userAgent }
          )
          yield* startSession(request, created)
          return created
        }))
      .handle("signIn", ({ payload, request }) =>
        Effect.gen(function*() {
          yield* perAddress(request)
          const { ip, userAgent } = auditContext(null, request)
          const signedIn = yield* users.signIn({ email: payload.email, password: payload.password }, { ip, userAgent })
          yield* startSession(request, signedIn)
          return signedIn
        }))
      .handle("signOut", ({ request }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          if (principal.credential.type === "session") {
            yield* sessions.end(principal.orgId, principal.credential.id, auditContext(principal, request))
          }
          yield* clearSessionCookie
        }))
      .handle("authMe", () => Effect.map(Effect.service(CurrentPrincipal), whoAmI))
      .handle("me", () => Effect.map(Effect.service(CurrentPrincipal), whoAmI))
  })
)

export const ApiKeysHandlers = HttpApiBuilder.group(
  Api,
  "apiKeys",
  Effect.fn(function*(handlers) {
    const keys = yield* ApiKeys
    return handlers
      .handle("create", ({ payload, request }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          return yield* keys.mint({
            orgId: principal.orgId,
            // A session's or a user's key mints keys of that user; a service key mints service keys.
            userId: principal.user?.id ?? null,
            name: payload.name,
            scopes: payload.scopes,
            expiresAt: payload.expires_at
          }, auditContext(principal, request))
        }))
      .handle("list", ({ query }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          return yield* keys.list(principal.orgId, query)
        }))
      .handle("revoke", ({ params, request }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          return yield* keys.revoke(principal.orgId, params.key_id, auditContext(principal, request))
        }))
  })
)

/** The handlers of the auth, apiKeys, org and audit groups; need `AuthorizationLayer`. */
export const IdentityHandlers = Layer.mergeAll(AuthHandlers, ApiKeysHandlers, OrgHandlers, AuditHandlers)
