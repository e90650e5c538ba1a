/** Handlers of the `audit` group: the org's audit log (`*` keys and sessions only). */
import { Audit } from "@svc/auth/Audit"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"

export const AuditHandlers = HttpApiBuilder.group(
  Api,
  "audit",
  Effect.fn(function*(handlers) {
    const audit = yield* Audit
    return handlers.handle("list", ({ query }) =>
      Effect.gen(function*() {
        const principal = yield* CurrentPrincipal
        return yield* audit.list(principal.orgId, query)
      }))
  })
)
