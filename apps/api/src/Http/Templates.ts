/**
 * Handlers of the `templates` group (docs/contract.md#templates). The middleware checked
 * `templates:read` or `templates:write` (and refused a `sandbox:<id>` key without them); the
 * create with a `registry_secret` also needs `secrets:use`; the
 * snapshot route is a sandbox's that makes a template: `sandboxes:write` and `templates:write`
 * (both checked by the middleware), then the single-sandbox policy.
 */
import { requireScope, sandboxPolicy } from "@svc/auth/Authorization"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import type { OrgId } from "@svc/domain/Ids"
import { Hosts } from "@svc/hosts/Hosts"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { Templates } from "@svc/templates/Templates"
import { Effect, Layer } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"

export const TemplatesGroup = HttpApiBuilder.group(
  Api,
  "templates",
  Effect.fn(function*(handlers) {
    const templates = yield* Templates
    const sandboxes = yield* Sandboxes
    const orgId = Effect.map(Effect.service(CurrentPrincipal), (p) => p.orgId as OrgId)
    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          // A registry secret is used (sent to its registry): `secrets:use`, as binding one is.
          if (payload.registry_secret !== undefined) yield* requireScope("secrets", "use")
          return yield* templates.create(yield* orgId, payload)
        }))
      .handle("list", ({ query }) => Effect.flatMap(orgId, (org) => templates.list(org, query)))
      .handle("get", ({ params }) => Effect.flatMap(orgId, (org) => templates.get(org, params.id)))
      .handle("logs", ({ params, query }) =>
        Effect.gen(function*() {
          const stream = yield* templates.logs(yield* orgId, params.id, query.follow === "true")
          return HttpServerResponse.stream(stream, { contentType: "text/plain; charset=utf-8" })
        }))
      .handle("delete", ({ params }) => Effect.flatMap(orgId, (org) => templates.remove(org, params.id)))
      .handle(
        "update",
        ({ params, payload }) => Effect.flatMap(orgId, (org) => templates.update(org, params.id, payload))
      )
      .handle("snapshot", ({ params, payload }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          const sandbox = yield* sandboxes.get(org, params.id)
          yield* sandboxPolicy({ id: sandbox.id, parentId: sandbox.parentId })
          return yield* templates.snapshot(org, sandbox, payload.name)
        }))
  })
)

/** The group with its service; needs SqlClient, Nats and the Sandboxes service. */
export const TemplatesHandlers = TemplatesGroup.pipe(
  Layer.provide(Templates.layer),
  Layer.provide(Hosts.layer)
)
