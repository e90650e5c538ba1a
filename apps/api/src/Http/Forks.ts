/**
 * Handlers of the `forks` group (docs/contract.md#lifecycle-timeouts-idleness-resume-fork). The
 * middleware checked `sandboxes:write`; the single-sandbox policy then allows a `sandbox:<id>`
 * key its own sandbox and its direct children, whose forks become children of its sandbox.
 */
import { confinedSandbox, sandboxPolicy } from "@svc/auth/Authorization"
import { Billing } from "@svc/billing/Billing"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import type { OrgId } from "@svc/domain/Ids"
import { Hosts } from "@svc/hosts/Hosts"
import { Forks } from "@svc/sandboxes/Forks"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { Effect, Layer } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"

export const ForksGroup = HttpApiBuilder.group(
  Api,
  "forks",
  Effect.fn(function*(handlers) {
    const forks = yield* Forks
    const sandboxes = yield* Sandboxes
    return handlers.handle("fork", ({ headers, params, payload }) =>
      Effect.gen(function*() {
        const principal = yield* CurrentPrincipal
        const orgId = principal.orgId as OrgId
        const source = yield* sandboxes.get(orgId, params.id)
        yield* sandboxPolicy({ id: source.id, parentId: source.parentId })
        const result = yield* forks.fork(orgId, source.id, payload, {
          confinedTo: yield* confinedSandbox,
          idempotencyKey: headers["idempotency-key"]
        })
        // A replay answers 200 with the first response, as it was.
        return result._tag === "Created" ? result.value : HttpServerResponse.jsonUnsafe(result.body, { status: 200 })
      }))
  })
)

/** The group with its service; needs SqlClient, Nats, SecretBox and the Sandboxes service. */
export const ForksHandlers = ForksGroup.pipe(
  Layer.provide(Forks.layer),
  // Each fork counts against the usage gate like a create (docs/contract.md#billing).
  Layer.provide(Billing.gate),
  Layer.provide(Hosts.layer)
)
