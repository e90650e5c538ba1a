/** Handlers of the `billing` group: usage and limits (docs/contract.md#billing), account-level. */
import { Billing } from "@svc/billing/Billing"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import { Effect, Layer } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { auditContext } from "./Authorization.ts"

const BillingGroup = HttpApiBuilder.group(
  Api,
  "billing",
  Effect.fn(function*(handlers) {
    const billing = yield* Billing
    return handlers
      .handle("usage", () =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          return yield* billing.usage(principal.orgId)
        }))
      .handle("limits", ({ payload, request }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          return yield* billing.setLimits(principal.orgId, payload, auditContext(principal, request))
        }))
  })
)

/** The billing routes with their service; needs `SqlClient` and `Audit`. */
export const BillingHandlers = BillingGroup.pipe(Layer.provide(Billing.layer))
