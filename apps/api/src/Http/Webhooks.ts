/**
 * Handlers of the `webhooks` group (docs/contract.md#webhooks). The middleware has checked the
 * account-level access; every operation runs in the caller's org (@svc/webhooks/Webhooks).
 */
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import { WebhookAddressGuard } from "@svc/webhooks/Subscriptions/AddressGuard"
import { Webhooks } from "@svc/webhooks/Subscriptions/Webhooks"
import { Effect, Layer } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"

const orgId = Effect.gen(function*() {
  const principal = yield* CurrentPrincipal
  return principal.orgId as string
})

export const WebhooksGroup = HttpApiBuilder.group(
  Api,
  "webhooks",
  Effect.fn(function*(handlers) {
    const webhooks = yield* Webhooks
    return handlers
      .handle("create", ({ payload, headers }) =>
        Effect.gen(function*() {
          const result = yield* webhooks.create(yield* orgId, payload, headers["idempotency-key"])
          // A replay answers 200 with the first response, as it was.
          return result._tag === "Created" ? result.value : HttpServerResponse.jsonUnsafe(result.body, { status: 200 })
        }))
      .handle("list", ({ query }) => Effect.flatMap(orgId, (org) => webhooks.list(org, query)))
      .handle("get", ({ params }) => Effect.flatMap(orgId, (org) => webhooks.get(org, params.id)))
      .handle(
        "update",
        ({ params, payload }) => Effect.flatMap(orgId, (org) => webhooks.update(org, params.id, payload))
      )
      .handle("delete", ({ params }) => Effect.flatMap(orgId, (org) => webhooks.remove(org, params.id)))
      .handle("test", ({ params }) => Effect.flatMap(orgId, (org) => webhooks.test(org, params.id)))
      .handle(
        "deliveries",
        ({ params, query }) => Effect.flatMap(orgId, (org) => webhooks.deliveries(org, params.id, query))
      )
      .handle(
        "retry",
        ({ params }) => Effect.flatMap(orgId, (org) => webhooks.retry(org, params.id, params.delivery_id))
      )
  })
)

/** The group with its service; needs SqlClient and Nats, reads SVC_WEBHOOK_ALLOWED_SUBNETS. */
export const WebhooksHandlers = WebhooksGroup.pipe(
  Layer.provide(Webhooks.layer),
  Layer.provide(WebhookAddressGuard.layer)
)
