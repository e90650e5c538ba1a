/**
 * Failures of the platform's own infrastructure under a request (Postgres, NATS, a stored row
 * the code cannot read): services let them through their typed error channel, and the
 * `Infrastructure` middleware, applied to every endpoint of `Api`, answers them in one place
 * (503 `unavailable`, or 400 `invalid_request` for a value Postgres cannot store). The wire
 * only ever sees `Unavailable`'s body: the failure itself is logged, never sent.
 */
import { Predicate, Schema, SchemaGetter } from "effect"
import { HttpApiMiddleware, HttpApiSchema } from "effect/http-api"
import type { SqlError } from "effect/sql"
import { InvalidRequest, Unavailable } from "../Errors.ts"

/**
 * A failure of a dependency rather than of the request. Structural for the errors of packages
 * the domain does not depend on (`@svc/bus`'s `BusError`, `@svc/db`'s `RowDecodeError`).
 */
export type InfrastructureFailure =
  | SqlError.SqlError
  | { readonly _tag: "BusError"; readonly operation: string; readonly message: string }
  | { readonly _tag: "RowDecodeError"; readonly query: string; readonly message: string }

const TAGS: ReadonlySet<unknown> = new Set(["SqlError", "BusError", "RowDecodeError"])

export const isInfrastructureFailure = (u: unknown): u is InfrastructureFailure =>
  Predicate.hasProperty(u, "_tag") && TAGS.has(u._tag)

/**
 * Lets handlers fail with an `InfrastructureFailure` (the middleware's declared errors are the
 * ones handlers may raise). It adds nothing to the contract: a 503 with the description of
 * `Unavailable` and no body of its own (the middleware answers before it would be encoded; an
 * API served without the middleware would still answer 503, with the contract's body, but
 * unlogged). Never decoded: a client reads `Unavailable`.
 */
export const InfrastructureFailureSchema = Schema.Void.pipe(
  Schema.decodeTo(Schema.declare(isInfrastructureFailure), {
    decode: SchemaGetter.forbidden(() => "an infrastructure failure is never decoded: clients read Unavailable"),
    encode: SchemaGetter.transform(() => undefined)
  }),
  HttpApiSchema.status(Unavailable.status),
  Schema.annotate({ description: new Unavailable().error })
)

export class Infrastructure extends HttpApiMiddleware.Service<Infrastructure>()("@svc/domain/Api/Infrastructure", {
  error: [Unavailable, InvalidRequest, InfrastructureFailureSchema]
}) {}
