/**
 * Handlers of the `volumes` group (docs/contract.md#volumes). The middleware has checked
 * `volumes:read` (GET) or `volumes:write` (the others); a `sandbox:<id>` key without volume
 * scopes is refused there (403).
 */
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import { Volumes } from "@svc/volumes/Volumes"
import { Effect, Layer } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"

export const VolumesGroup = HttpApiBuilder.group(
  Api,
  "volumes",
  Effect.fn(function*(handlers) {
    const volumes = yield* Volumes
    const orgId = Effect.map(Effect.service(CurrentPrincipal), (p) => p.orgId)
    return handlers
      .handle("create", ({ headers, payload }) =>
        Effect.gen(function*() {
          const result = yield* volumes.create(yield* orgId, payload, headers["idempotency-key"])
          // A replay answers 200 with the first response, as it was.
          return result._tag === "Created" ? result.value : HttpServerResponse.jsonUnsafe(result.body, { status: 200 })
        }))
      .handle("list", ({ query }) => Effect.flatMap(orgId, (org) => volumes.list(org, query)))
      .handle("get", ({ params }) => Effect.flatMap(orgId, (org) => volumes.get(org, params.id)))
      .handle("delete", ({ params }) => Effect.flatMap(orgId, (org) => volumes.remove(org, params.id)))
  })
)

/** The group with its service; needs SqlClient, Nats and SecretBox. */
export const VolumesHandlers = VolumesGroup.pipe(Layer.provide(Volumes.layer))
