/**
 * Handler of POST /v1/sandboxes/{id}/ports/{port}/token (docs/contract.md#exposed-ports). The
 * middleware has checked `sandboxes:write`; the sandbox is the org's and within a
 * `sandbox:<id>` key's reach. The URL takes the scheme and port the client reached this API on.
 */
import { sandboxPolicy } from "@svc/auth/Authorization"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import { PREVIEW_TTL_S_DEFAULT, PreviewToken } from "@svc/domain/Api/Previews"
import { type PreviewOrigin, Previews } from "@svc/sandboxes/Previews"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { Effect } from "effect"
import type { HttpServerRequest } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"

const originOf = (request: HttpServerRequest.HttpServerRequest): PreviewOrigin => {
  const port = /:(\d{1,5})$/.exec(request.headers["host"] ?? "")?.[1]
  return {
    scheme: request.headers["x-forwarded-proto"]?.toLowerCase() === "https" ? "https" : "http",
    port: port === undefined ? undefined : Number(port)
  }
}

export const PreviewsGroup = HttpApiBuilder.group(
  Api,
  "previews",
  Effect.fn(function*(handlers) {
    const previews = yield* Previews
    const sandboxes = yield* Sandboxes
    return handlers.handle("createToken", ({ params, payload, request }) =>
      Effect.gen(function*() {
        const principal = yield* CurrentPrincipal
        const sandbox = yield* sandboxes.get(principal.orgId, params.id)
        yield* sandboxPolicy({ id: sandbox.id, parentId: sandbox.parentId })
        const minted = yield* previews.mint(
          principal.orgId,
          sandbox.id,
          params.port,
          payload.ttl_s ?? PREVIEW_TTL_S_DEFAULT,
          originOf(request)
        )
        return new PreviewToken({ ...minted, expiresAt: new Date(minted.expiresAt).toISOString() })
      }))
  })
)
