/**
 * What every response of the API shares, whatever route (or none) answered it:
 * - an `x-request-id` (the client's own when it sent a sane one, else a new one);
 * - the client's address: the TCP peer, or behind the proxies listed in `SVC_TRUSTED_PROXIES`
 *   the client they forwarded for (`@svc/auth/ClientAddress`); everything after this sees it as
 *   `request.remoteAddress` (rate limits, the audit log);
 * - `?token=` refused with 401 `token_in_query_not_allowed` on every path but `/terminal`
 *   (/v1/openapi.json, /docs and unknown paths included), before any route runs;
 * - the error body of docs/contract.md#errors for failures raised outside endpoint handlers:
 *   unknown routes (404 `not_found`), undecodable input (400 `invalid_request` with `issues`),
 *   bodies over the limit (413 `payload_too_large`), and anything unexpected (500 `internal`,
 *   details only in the log, correlated by the request id);
 * - `{error, code}` on every refusal: an error response that is not JSON (the framework's 415
 *   for a content type a route does not take, its empty 413, ...) is replaced by the contract's
 *   body for its status, and a 429 (and a 503 `no_capacity`) carries `Retry-After` from its `retry_after_s`;
 * - `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` (the IETF draft's fields): the
 *   token bucket that decided the request (its credential's, its address's sign-in or failed
 *   credentials'), else its address's failed-credential bucket (`@svc/auth/RateLimit`);
 * - the 1 MiB body limit (routes that take uploads raise it for themselves);
 * - the request metrics (Metrics.ts) and the request id on the request's span.
 */
import { clientAddress, NO_PROXIES, rateKey, trustedProxies } from "@svc/auth/ClientAddress"
import { AuthConfig, TrustedProxies } from "@svc/auth/Config"
import { RateLimiter } from "@svc/auth/RateLimit"
import * as Errors from "@svc/domain/Errors"
import { AccessLog } from "@svc/telemetry/Logger"
import {
  ByteSize,
  Cause,
  Clock,
  Context,
  Effect,
  type Fiber,
  Layer,
  Option,
  References,
  Schema,
  Tracer,
  type Types
} from "effect"
import { HttpIncomingMessage, HttpRouter, HttpServerError, HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiError } from "effect/http-api"
import { randomBytes } from "node:crypto"
import * as Metrics from "./Metrics.ts"

export const MAX_BODY_BYTES = 1024 * 1024

/** The one path that takes its credential in `?token=` (browsers cannot set WebSocket headers). */
export const TERMINAL_PATH = "/terminal"

const REQUEST_ID = /^[A-Za-z0-9._:-]{8,128}$/

// Request ids must be unique, not secret: one call for random bytes per 512 ids instead of one per
// request (that call was 7 % of an authenticated GET's CPU, bench/api.ts).
let randomPool = Buffer.alloc(0)
let randomOffset = 0

/** A new request id, `req_<time><16 hex digits>`. */
export const newRequestId = () => {
  if (randomOffset + 8 > randomPool.length) {
    randomPool = randomBytes(4096)
    randomOffset = 0
  }
  const random = randomPool.toString("hex", randomOffset, randomOffset + 8)
  randomOffset += 8
  return `req_${Date.now().toString(36)}${random}`
}

export const pathOf = (url: string) => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

/** The `token` query parameter, if any (also an empty one). */
export const queryToken = (url: string): string | undefined => {
  const q = url.indexOf("?")
  if (q === -1) return undefined
  const value = new URLSearchParams(url.slice(q + 1)).get("token")
  return value === null ? undefined : value
}

const json = (error: Errors.ApiError, headers?: Record<string, string>) => {
  const { status, body } = Errors.errorBody(error)
  return HttpServerResponse.jsonUnsafe(body, { status, ...(headers ? { headers } : {}) })
}

/** Maps a failure that escaped the endpoints to the contract's error response. */
export const renderCause = (cause: Cause.Cause<unknown>): Effect.Effect<HttpServerResponse.HttpServerResponse> => {
  for (const reason of cause.reasons) {
    const value = Cause.isFailReason(reason) ? reason.error : Cause.isDieReason(reason) ? reason.defect : undefined
    if (Errors.isApiError(value)) return Effect.succeed(json(value))
    if (HttpServerError.isHttpServerError(value)) {
      const r = value.reason
      if (r._tag === "RouteNotFound") {
        return Effect.succeed(json(new Errors.NotFound({ error: "No such route" })))
      }
      if (r._tag === "RequestParseError") {
        return Effect.succeed(
          r.reason === "BodyTooLarge"
            ? json(new Errors.PayloadTooLarge({ error: `Request bodies are limited to ${MAX_BODY_BYTES} bytes` }))
            : json(new Errors.InvalidRequest({ error: "The request body could not be read" }))
        )
      }
    }
    if (HttpApiError.HttpApiSchemaError.is(value) && value.kind !== "Body" && value.kind !== "ResponseHeaders") {
      const where = value.kind === "Payload" ? "body" : value.kind.toLowerCase()
      return Effect.succeed(json(Errors.invalidRequestFrom(value.cause, `Invalid request ${where}`)))
    }
    if (HttpApiError.HttpApiPayloadTooLarge.is(value)) {
      return Effect.succeed(json(new Errors.PayloadTooLarge()))
    }
    if (Schema.isSchemaError(value)) {
      return Effect.succeed(json(Errors.invalidRequestFrom(value)))
    }
  }
  if (Cause.hasInterruptsOnly(cause)) {
    return Effect.succeed(json(new Errors.Unavailable({ error: "The server is shutting down; retry" })))
  }
  return Effect.as(Effect.logError("unhandled request failure", cause), json(new Errors.Internal()))
}

/** The contract's error for a status some part of the stack answered without a JSON body. */
export const errorForStatus = (status: number): { readonly error: string; readonly code: string } => {
  switch (status) {
    case 401:
      return { error: new Errors.Unauthenticated().error, code: Errors.Unauthenticated.code }
    case 404:
    case 405:
      return { error: "No such route", code: Errors.NotFound.code }
    case 409:
      return { error: new Errors.Conflict().error, code: Errors.Conflict.code }
    case 413:
    case 431:
      return { error: new Errors.PayloadTooLarge().error, code: Errors.PayloadTooLarge.code }
    case 415:
      return { error: new Errors.UnsupportedMediaType().error, code: Errors.UnsupportedMediaType.code }
    case 503:
      return { error: new Errors.Unavailable().error, code: Errors.Unavailable.code }
    default:
      return status >= 500
        ? { error: new Errors.Internal().error, code: Errors.Internal.code }
        : { error: new Errors.InvalidRequest().error, code: Errors.InvalidRequest.code }
  }
}

const decoder = new TextDecoder()

const contentTypeOf = (response: HttpServerResponse.HttpServerResponse): string =>
  (response.headers["content-type"] ?? ("contentType" in response.body ? response.body.contentType : undefined) ?? "")
    .toLowerCase()

/** Error responses in the contract's shape, 429s (and 503 `no_capacity`) with their `Retry-After`. */
const contractShape = (response: HttpServerResponse.HttpServerResponse): HttpServerResponse.HttpServerResponse => {
  if (response.status < 400) return response
  if (!contentTypeOf(response).includes("json")) {
    const headers: Record<string, string> = {}
    for (const [name, value] of Object.entries(response.headers)) {
      if (name !== "content-type" && name !== "content-length") headers[name] = value
    }
    if (response.status === 401) headers["www-authenticate"] ??= "Bearer"
    return HttpServerResponse.jsonUnsafe(errorForStatus(response.status), { status: response.status, headers })
  }
  if (
    (response.status === 429 || response.status === 503) && response.headers["retry-after"] === undefined &&
    response.body._tag === "Uint8Array"
  ) {
    try {
      const body = JSON.parse(decoder.decode(response.body.body)) as { readonly retry_after_s?: unknown }
      if (typeof body.retry_after_s === "number") {
        return HttpServerResponse.setHeader(response, "retry-after", String(body.retry_after_s))
      }
    } catch {
      // Not ours to fix: leave it.
    }
  }
  return response
}

const TOKEN_IN_QUERY = new Errors.TokenInQueryNotAllowed()
const BODY_LIMIT = ByteSize.bytes(MAX_BODY_BYTES)
/** A template's body may carry a Dockerfile's context: base64 of up to 50 MiB, and the rest. */
export const MAX_TEMPLATE_BODY_BYTES = Math.ceil((50 * 1024 * 1024) / 3) * 4 + 1024 * 1024
const TEMPLATE_BODY_LIMIT = ByteSize.bytes(MAX_TEMPLATE_BODY_BYTES)
const bodyLimitOf = (request: HttpServerRequest.HttpServerRequest) =>
  request.method === "POST" && request.url.split("?")[0] === "/v1/templates" ? TEMPLATE_BODY_LIMIT : BODY_LIMIT

export const ApiMiddleware = HttpRouter.middleware<{ handles: unknown }>()(
  Effect.gen(function*() {
    const proxies = yield* Effect.map(
      Effect.orDie(TrustedProxies),
      (entries) => entries.length === 0 ? NO_PROXIES : trustedProxies(entries)
    )
    const accessLog = yield* AccessLog
    const limiter = yield* RateLimiter
    const clock = yield* Clock.Clock
    /**
     * The answer as sent: counted and timed (`/metrics`), the request id on the request's span
     * (logs and traces meet on it) and in its header, one `request` log line when the access log
     * is on (`SVC_LOG_FORMAT=json`). All of it synchronous but the log line: this runs once per
     * request (bench/api.ts).
     */
    const answer = (
      fiber: Fiber.Fiber<unknown, unknown>,
      request: HttpServerRequest.HttpServerRequest,
      client: string | undefined,
      requestId: string,
      started: number,
      response: HttpServerResponse.HttpServerResponse
    ): Effect.Effect<HttpServerResponse.HttpServerResponse> => {
      const context = fiber.context
      const route = Metrics.routeOf(request.method, request.url)
      const seconds = (performance.now() - started) / 1000
      Metrics.observeUnsafe(context, request.method, route, response.status, seconds)
      const span = Context.getOrUndefined(context, Tracer.ParentSpan)
      if (span !== undefined && span._tag === "Span") span.attribute("svc.request_id", requestId)
      const quota = limiter.quotaOf(fiber) ?? limiter.addressQuota(rateKey(client), clock.currentTimeMillisUnsafe())
      const answered = HttpServerResponse.setHeaders(response, {
        "x-request-id": requestId,
        "ratelimit-limit": String(quota.limit),
        "ratelimit-remaining": String(quota.remaining),
        "ratelimit-reset": String(quota.resetS)
      })
      if (!accessLog) return Effect.succeed(answered)
      return Effect.as(
        Effect.logInfo("request").pipe(Effect.annotateLogs({
          requestId,
          method: request.method,
          route,
          status: response.status,
          duration_ms: Math.round(seconds * 1000)
        })),
        answered
      )
    }
    // Every failure is rendered here; the declared `unhandled` error only satisfies the router's
    // check that a global middleware passes on what it does not handle.
    // Every request passes here: no generator, one context update for what it provides (the
    // request when its client address changed, the body limit, the request id in the logs'
    // annotations) and one continuation for the answer, success or failure (bench/api.ts).
    return (
      httpEffect: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, HttpServerRequest.HttpServerRequest>
    ): Effect.Effect<
      HttpServerResponse.HttpServerResponse,
      Types.unhandled,
      HttpServerRequest.HttpServerRequest
    > =>
      Effect.withFiber((fiber) => {
        const context = fiber.context
        const request = Context.getUnsafe(context, HttpServerRequest.HttpServerRequest)
        const started = performance.now()
        const incoming = request.headers["x-request-id"]
        const requestId = incoming !== undefined && REQUEST_ID.test(incoming) ? incoming : newRequestId()
        const url = request.url
        const peer = Option.getOrUndefined(request.remoteAddress)
        const client = clientAddress(peer, request.headers["x-forwarded-for"], proxies)
        if (url.includes("?") && queryToken(url) !== undefined && pathOf(url) !== TERMINAL_PATH) {
          const refused = json(TOKEN_IN_QUERY, { "www-authenticate": "Bearer" })
          return answer(fiber, request, client, requestId, started, refused)
        }
        const withRequest = client === undefined || client === peer
          ? context
          : Context.add(
            context,
            HttpServerRequest.HttpServerRequest,
            request.modify({ remoteAddress: Option.some(client) })
          )
        const annotations = Context.get(context, References.CurrentLogAnnotations)
        const respond = (response: HttpServerResponse.HttpServerResponse) =>
          answer(fiber, request, client, requestId, started, contractShape(response))
        return Effect.provideContext(
          Effect.matchCauseEffect(httpEffect, {
            onFailure: (cause) => Effect.flatMap(renderCause(cause), respond),
            onSuccess: respond
          }),
          Context.add(
            Context.add(withRequest, HttpIncomingMessage.MaxBodySize, bodyLimitOf(request)),
            References.CurrentLogAnnotations,
            { ...annotations, requestId }
          )
        )
      })
  }),
  { global: true }
).pipe(
  // The limiter the Authorization middleware takes from (layers are shared within a build): its
  // buckets are what the `RateLimit-*` fields report.
  Layer.provide(RateLimiter.layer.pipe(Layer.provide(AuthConfig.layer)))
)
