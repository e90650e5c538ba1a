/**
 * The one place where a failure of the platform's infrastructure becomes an answer, for every
 * endpoint of `Api` (the `Infrastructure` middleware of @svc/domain/Api/Infrastructure, outside
 * `Authorization`, so a credential that cannot be checked is answered here too). Services let
 * these failures through their typed error channel; nothing else maps them.
 *
 * - A database failure (`SqlError`) is 503 `unavailable`, except a value Postgres cannot store
 *   (SQLSTATE class 22, data exception: a NUL in text or jsonb, a number out of range): that is
 *   the request's fault, 400 `invalid_request`. Validation should have refused it first; the
 *   warning in the log says which one slipped through.
 * - A bus failure (`BusError`) is 503 `unavailable`.
 * - A row its schema refuses (`RowDecodeError`) is a defect: 500 `internal`, logged with the
 *   query by the server's renderer.
 * The failure itself goes to the log (correlated by the request id), never into the body.
 */
import { Infrastructure, type InfrastructureFailure, isInfrastructureFailure } from "@svc/domain/Api/Infrastructure"
import * as Errors from "@svc/domain/Errors"
import { Effect, Layer, type Types } from "effect"
import type { HttpServerResponse } from "effect/http"

const DATABASE_UNAVAILABLE = new Errors.Unavailable({ error: "The database is unavailable; retry" })
const BUS_UNAVAILABLE = new Errors.Unavailable({ error: "The message bus is unavailable; retry" })
const UNSTORABLE = new Errors.InvalidRequest({
  error: "The request holds a value that cannot be stored (e.g. a NUL character)"
})

/** The SQLSTATE of a failure Postgres reported, if it was one. */
const sqlState = (cause: unknown): string | undefined => {
  const code = (cause as { readonly code?: unknown } | undefined)?.code
  return typeof code === "string" ? code : undefined
}

/** The answer to an infrastructure failure (see the module's comment). */
const answer = (
  failure: InfrastructureFailure
): Effect.Effect<never, Errors.Unavailable | Errors.InvalidRequest> => {
  switch (failure._tag) {
    case "SqlError": {
      const state = sqlState(failure.reason.cause)
      if (state?.startsWith("22")) {
        return Effect.andThen(
          Effect.logWarning("database refused a value of the request", { sqlState: state }),
          Effect.fail(UNSTORABLE)
        )
      }
      return Effect.andThen(Effect.logWarning("database failure", failure), Effect.fail(DATABASE_UNAVAILABLE))
    }
    case "BusError":
      return Effect.andThen(
        Effect.logWarning("bus failure", { operation: failure.operation, error: failure.message }),
        Effect.fail(BUS_UNAVAILABLE)
      )
    case "RowDecodeError":
      return Effect.die(failure)
  }
}

type Answered = Effect.Effect<
  HttpServerResponse.HttpServerResponse,
  Types.unhandled | Errors.Unavailable | Errors.InvalidRequest
>

export const InfrastructureMiddleware = Layer.succeed(
  Infrastructure,
  (httpEffect) =>
    Effect.catch(httpEffect, (error): Answered => isInfrastructureFailure(error) ? answer(error) : Effect.fail(error))
)
