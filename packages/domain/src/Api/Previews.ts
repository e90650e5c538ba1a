/**
 * Preview tokens of exposed ports (docs/contract.md#exposed-ports): the `sandboxes` scope, `write`,
 * and the single-sandbox policy, as every sandbox route.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { InvalidRequest, NotFound, SandboxOutOfScope, Unavailable } from "../Errors.ts"
import { SandboxId } from "../Ids.ts"
import { IntFromQuery } from "../Pagination.ts"
import { Bounded, TimestampText } from "../Text.ts"
import { Access } from "./Auth.ts"

export const PREVIEW_TTL_S_MIN = 60
export const PREVIEW_TTL_S_MAX = 86_400
export const PREVIEW_TTL_S_DEFAULT = 3600

export class PreviewTokenRequest extends Schema.Class<PreviewTokenRequest>("PreviewTokenRequest")({
  /** Seconds the token lets requests in; 1 hour unless set, 24 hours at most. */
  ttl_s: Schema.optionalKey(
    Schema.Int.check(Schema.isBetween({ minimum: PREVIEW_TTL_S_MIN, maximum: PREVIEW_TTL_S_MAX }))
  )
}) {}

export class PreviewToken extends Schema.Class<PreviewToken>("PreviewToken")({
  /** The preview's address: `{scheme}://{port}-{sandbox_id}.{SVC_PREVIEW_DOMAIN}[:{port}]/`. */
  url: Bounded(2048),
  /** Sent in `x-svc-preview-token`; shown once, kept nowhere. */
  token: Bounded(1024),
  expiresAt: TimestampText
}) {}

export class PreviewsApi extends HttpApiGroup.make("previews")
  .add(
    HttpApiEndpoint.post("createToken", "/v1/sandboxes/:id/ports/:port/token", {
      params: { id: SandboxId, port: IntFromQuery(1, 65_535) },
      payload: PreviewTokenRequest,
      success: PreviewToken.pipe(HttpApiSchema.status(201)),
      error: [InvalidRequest, NotFound, SandboxOutOfScope, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "A token for one of the sandbox's `exposed_ports` (404 for another port): requests to `url` " +
        "with the token in `x-svc-preview-token` reach that port of the sandbox, HTTP and WebSocket, until " +
        "`expiresAt`. `ttl_s` 60 to 86400, default 3600. A key allowed on the sandbox (`sandboxes:write`) in " +
        "`Authorization` is let in the same way."
    }))
  )
  .annotateMerge(Access.resource("sandboxes"))
  .annotateMerge(OpenApi.annotations({ title: "Exposed ports" }))
{}
