/**
 * Handler of PUT /v1/sandboxes/{id}/timeout (docs/contract.md#lifecycle-timeouts-idleness-resume).
 * The middleware has checked `sandboxes:write`; the sandbox is the org's and within a
 * `sandbox:<id>` key's reach.
 */
import { sandboxPolicy } from "@svc/auth/Authorization"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"

export const LifecycleGroup = HttpApiBuilder.group(
  Api,
  "lifecycle",
  Effect.fn(function*(handlers) {
    const sandboxes = yield* Sandboxes
    return handlers.handle("setTimeout", ({ params, payload }) =>
      Effect.gen(function*() {
        const principal = yield* CurrentPrincipal
        const sandbox = yield* sandboxes.get(principal.orgId, params.id)
        yield* sandboxPolicy({ id: sandbox.id, parentId: sandbox.parentId })
        return yield* sandboxes.setTimeout(principal.orgId, sandbox.id, payload)
      }))
  })
)
