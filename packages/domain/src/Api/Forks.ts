/**
 * Forks (docs/contract.md#lifecycle-timeouts-idleness-resume-fork): `POST /v1/sandboxes/{id}/fork`
 * makes up to 20 sandboxes whose file system starts as a copy of the running source's. A
 * sandbox's route: `sandboxes:write`; a `sandbox:<id>` key forks its own sandbox (or a direct
 * child) and its forks are children of its sandbox.
 */
import { Effect, Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import {
  Conflict,
  IdempotencyKeyReused,
  InvalidRequest,
  NotFound,
  QuotaExceeded,
  SandboxOutOfScope,
  Unavailable,
  UsageLimitReached
} from "../Errors.ts"
import { SandboxId } from "../Ids.ts"
import { Metadata, Sandbox } from "../Sandbox.ts"
import { Name } from "../Text.ts"
import { Access } from "./Auth.ts"
import { IdempotencyKey } from "./Sandboxes.ts"

/** Most forks one request makes. */
export const MAX_FORKS = 20

export const ForkRequest = Schema.Struct({
  count: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: MAX_FORKS })).pipe(
    Schema.withDecodingDefaultKey(Effect.succeed(1))
  ),
  /** The forks' name (with `-1`, `-2`... when there are several); default: each one's id. */
  name: Schema.optionalKey(Name(110)),
  /** The forks' metadata; default: the source's. */
  metadata: Schema.optionalKey(Metadata)
})
export type ForkRequest = typeof ForkRequest.Type

export class ForkBody extends Schema.Class<ForkBody>("ForkRequest")(ForkRequest.fields) {}

export const ForkResult = Schema.Struct({ sandboxes: Schema.Array(Sandbox).check(Schema.isMaxLength(MAX_FORKS)) })
export type ForkResult = typeof ForkResult.Type

export class ForksApi extends HttpApiGroup.make("forks")
  .add(
    HttpApiEndpoint.post("fork", "/v1/sandboxes/:id/fork", {
      params: { id: SandboxId },
      payload: ForkBody,
      headers: { "idempotency-key": Schema.optionalKey(IdempotencyKey) },
      success: ForkResult.pipe(HttpApiSchema.status(201)),
      error: [
        InvalidRequest,
        NotFound,
        Conflict,
        IdempotencyKeyReused,
        SandboxOutOfScope,
        QuotaExceeded,
        UsageLimitReached,
        Unavailable
      ]
    }).annotateMerge(OpenApi.annotations({
      description: "Forks a running sandbox: 201 `{sandboxes}`, `count` (1 to 20, default 1) new `pending` " +
        "sandboxes of its template, resources, env, network policy, secrets and exposed ports whose file system " +
        "starts as a copy of the source's now (copy-on-write: one snapshot of what it wrote, shared). Processes " +
        "are not copied; the source keeps running; volumes are not attached to the forks. A source that is not " +
        "running is 409; each fork counts against the quotas (429 `quota_exceeded`, none made). With a " +
        "`sandbox:<id>` key the forks are children of its sandbox."
    }))
  )
  .annotateMerge(Access.resource("sandboxes"))
  .annotateMerge(OpenApi.annotations({ title: "Forks" }))
{}
