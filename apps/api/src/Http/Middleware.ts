/**
 * What every response of the API shares, whatever route (or none) answered it:
 * - an `x-request-id` (the client's own when it sent a sane one, else a new one);
 * - the error body of api.md for failures raised outside endpoint handlers: unknown routes
 *   (404 `not_found`), undecodable input (400 `invalid_request` with `issues`), bodies over the
 *   limit (413 `payload_too_large`), and anything unexpected (500 `internal`, details only in
 *   the log, correlated by the request id);
 * - the 1 MiB body limit (routes that take uploads raise it for themselves).
 */
import * as Errors from "@svc/domain/Errors"
import { ByteSize, Cause, Effect, Schema, type Types } from "effect"
import { HttpIncomingMessage, HttpRouter, HttpServerError, HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiError } from "effect/http-api"
import { randomBytes } from "node:crypto"

export const MAX_BODY_BYTES = 1024 * 1024

const REQUEST_ID = /^[A-Za-z0-9._:-]{8,128}$/

const newRequestId = () => `req_${Date.now().toString(36)}${randomBytes(8).toString("hex")}`

const json = (error: Errors.ApiError) => {
  const { status, body } = Errors.errorBody(error)
  return HttpServerResponse.jsonUnsafe(body, { status })
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

export const ApiMiddleware = HttpRouter.middleware<{ handles: unknown }>()(
  // Every failure is rendered here; the declared `unhandled` error only satisfies the router's
  // check that a global middleware passes on what it does not handle.
  (httpEffect): Effect.Effect<HttpServerResponse.HttpServerResponse, Types.unhandled, HttpServerRequest.HttpServerRequest> =>
    Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const incoming = request.headers["x-request-id"]
      const requestId = incoming !== undefined && REQUEST_ID.test(incoming) ? incoming : newRequestId()
      const response = yield* httpEffect.pipe(
        Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(MAX_BODY_BYTES)),
        Effect.catchCause(renderCause),
        Effect.annotateLogs({ requestId })
      )
      return HttpServerResponse.setHeader(response, "x-request-id", requestId)
    }),
  { global: true }
)
