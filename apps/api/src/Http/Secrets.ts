/**
 * Handlers of the `secrets` group (docs/contract.md#secrets). The middleware has checked
 * `secrets:read` (GET) or `secrets:write` (the others). Here, for the changes: the secret is
 * looked up first (404 for another org's or a missing one), then a PATCH of `allowed_hosts` or
 * `header_name` needs `secrets:use` (403 `insufficient_scope`), then a userless service key must
 * be listed in `SVC_SECRET_MANAGER_API_KEY_IDS` (or its file) and hold write and use (403
 * `secret_manager_not_allowed`); the list is read again at every such check.
 */
import { requireScope, requireSecretManager } from "@svc/auth/Authorization"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import { patchNeedsUse } from "@svc/domain/Secret"
import { Secrets } from "@svc/secrets/Secrets"
import { SecretManagers } from "@svc/secrets/Secrets/Managers"
import { Effect, Layer } from "effect"
import { HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { auditContext } from "./Authorization.ts"

export const SecretsGroup = HttpApiBuilder.group(
  Api,
  "secrets",
  Effect.fn(function*(handlers) {
    const secrets = yield* Secrets
    const managers = yield* SecretManagers

    /** The caller's org and audit context, once it may manage the org's secrets. */
    const manager = Effect.gen(function*() {
      const principal = yield* CurrentPrincipal
      yield* requireSecretManager(yield* managers.listed)
      const request = yield* HttpServerRequest.HttpServerRequest
      return { orgId: principal.orgId, audit: auditContext(principal, request) }
    })
    const orgId = Effect.map(Effect.service(CurrentPrincipal), (p) => p.orgId)

    return handlers
      .handle("create", ({ headers, payload }) =>
        Effect.gen(function*() {
          const { audit, orgId } = yield* manager
          const result = yield* secrets.create(orgId, payload, headers["idempotency-key"], audit)
          // A replay answers 200 with the first response, as it was.
          return result._tag === "Created" ? result.value : HttpServerResponse.jsonUnsafe(result.body, { status: 200 })
        }))
      .handle("list", ({ query }) => Effect.flatMap(orgId, (org) => secrets.list(org, query)))
      .handle("get", ({ params }) => Effect.flatMap(orgId, (org) => secrets.get(org, params.id)))
      .handle("rotate", ({ params, payload }) =>
        Effect.gen(function*() {
          yield* secrets.get(yield* orgId, params.id)
          const { audit, orgId: org } = yield* manager
          return yield* secrets.rotate(org, params.id, payload.value, audit)
        }))
      .handle("update", ({ params, payload }) =>
        Effect.gen(function*() {
          yield* secrets.get(yield* orgId, params.id)
          if (patchNeedsUse(payload)) yield* requireScope("secrets", "use")
          const { audit, orgId: org } = yield* manager
          return yield* secrets.update(org, params.id, payload, audit)
        }))
      .handle("delete", ({ params }) =>
        Effect.gen(function*() {
          yield* secrets.get(yield* orgId, params.id)
          const { audit, orgId: org } = yield* manager
          return yield* secrets.remove(org, params.id, audit)
        }))
  })
)

/** The group with its services; needs SqlClient, Nats, SecretBox and Audit. */
export const SecretsHandlers = SecretsGroup.pipe(
  Layer.provide(Secrets.layer),
  Layer.provide(SecretManagers.layer)
)
