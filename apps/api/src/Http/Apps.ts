/**
 * Handlers of the `apps` group (docs/contract.md#apps). The middleware has checked `apps:read`
 * (GET) or `apps:write` (the others); a `sandbox:<id>` key without app scopes is refused there
 * (403).
 */
import { Apps } from "@svc/apps/Apps"
import { Billing } from "@svc/billing/Billing"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import { Effect, Layer } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { auditContext } from "./Authorization.ts"

export const AppsGroup = HttpApiBuilder.group(
  Api,
  "apps",
  Effect.fn(function*(handlers) {
    const apps = yield* Apps
    const orgId = Effect.map(Effect.service(CurrentPrincipal), (p) => p.orgId)
    const caller = Effect.map(Effect.service(CurrentPrincipal), (p) => p)
    return handlers
      .handle("create", ({ headers, payload, request }) =>
        Effect.gen(function*() {
          const principal = yield* caller
          const result = yield* apps.create(
            principal.orgId,
            payload,
            headers["idempotency-key"],
            auditContext(principal, request)
          )
          // A replay answers 200 with the first response, as it was.
          return result._tag === "Created" ? result.value : HttpServerResponse.jsonUnsafe(result.body, { status: 200 })
        }))
      .handle("list", ({ query }) => Effect.flatMap(orgId, (org) => apps.list(org, query)))
      .handle("get", ({ params }) => Effect.flatMap(orgId, (org) => apps.get(org, params.id)))
      .handle(
        "update",
        ({ params, payload, request }) =>
          Effect.flatMap(caller, (p) => apps.update(p.orgId, params.id, payload, auditContext(p, request)))
      )
      .handle(
        "delete",
        ({ params, request }) =>
          Effect.flatMap(caller, (p) => apps.remove(p.orgId, params.id, auditContext(p, request)))
      )
  })
)

/**
 * The group with its service; needs SqlClient, SecretBox and Audit. A blocked org's creates and
 * scale-ups are 402 (docs/contract.md#billing).
 */
export const AppsHandlers = AppsGroup.pipe(Layer.provide(Apps.layer), Layer.provide(Billing.gate))
