/** Handlers of the `org` group: the caller's org (docs/contract.md#org-and-audit). */
import { Orgs } from "@svc/auth/Orgs"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { auditContext } from "./Authorization.ts"

export const OrgHandlers = HttpApiBuilder.group(
  Api,
  "org",
  Effect.fn(function*(handlers) {
    const orgs = yield* Orgs
    return handlers
      .handle("get", () =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          return yield* orgs.get(principal.orgId)
        }))
      .handle("update", ({ payload, request }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          return yield* orgs.rename(principal.orgId, payload.name, auditContext(principal, request))
        }))
  })
)
