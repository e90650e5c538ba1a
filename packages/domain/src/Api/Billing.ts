/** Usage and limits (docs/contract.md#billing): account-level, `*` keys and sessions only. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { LimitsRequest, Usage } from "../Billing.ts"
import { InvalidRequest, Unavailable } from "../Errors.ts"
import { Access } from "./Auth.ts"

export class BillingApi extends HttpApiGroup.make("billing")
  .add(
    HttpApiEndpoint.get("usage", "/v1/billing/usage", { success: Usage, error: Unavailable }).annotateMerge(
      OpenApi.annotations({
        description: "The current period's (calendar month, UTC) metered spend in micros, the limits, and whether " +
          "the org is blocked (spend at or over the hard limit: creating or starting sandboxes is 402)."
      })
    ),
    HttpApiEndpoint.put("limits", "/v1/billing/limits", {
      payload: LimitsRequest,
      success: Usage,
      error: [InvalidRequest, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Sets the hard limit and the alert value in micros (an omitted field is kept, `null` removes " +
        "it); the usage object after. A hard limit raised above the spend unblocks the org and re-arms the " +
        "thresholds above the spend; one lowered to or below it blocks the org. Audit entry " +
        "`billing.limits_updated`."
    }))
  )
  .annotateMerge(Access.account)
  .annotateMerge(OpenApi.annotations({ title: "Billing" }))
{}
