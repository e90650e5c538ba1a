/**
 * Authorization decisions (docs/contract.md#scopes), as pure functions over an endpoint's declared
 * `AccessRule` and a credential's `Grant`, plus the Effect helpers handlers call for checks
 * that depend on the request (the single-sandbox policy, conditional scopes).
 *
 * The `Authorization` middleware (apps/api/src/Http/Authorization.ts) calls `decide` for every
 * request; handlers never repeat what their rule declares.
 */
import { type AccessRule, CurrentPrincipal, type Principal, type ScopeRequirement } from "@svc/domain/Api/Auth"
import * as Confinement from "@svc/domain/Confinement"
import {
  EgressBeyondCeiling,
  FullAccessRequired,
  InsufficientScope,
  SandboxOutOfScope,
  SecretManagerNotAllowed
} from "@svc/domain/Errors"
import type { SandboxId } from "@svc/domain/Ids"
import type { NetworkPolicy } from "@svc/domain/Network"
import * as Scopes from "@svc/domain/Scopes"
import { Effect } from "effect"

export type Decision =
  | { readonly _tag: "Allowed" }
  | { readonly _tag: "FullAccessRequired"; readonly message: string | undefined }
  | { readonly _tag: "InsufficientScope"; readonly requiredScope: ScopeRequirement }

const ALLOWED: Decision = { _tag: "Allowed" }

const holds = (grant: Scopes.Grant, requirement: ScopeRequirement): boolean => {
  const [resource, action] = requirement.split(":") as [Scopes.Resource, Scopes.Action]
  return Scopes.allows(grant, resource, action as never)
}

/**
 * What `rule` says about a request with `method` by a credential holding `grant`. `Public`
 * routes are decided before authentication; here they are allowed.
 */
export const decide = (rule: AccessRule, method: string, grant: Scopes.Grant): Decision => {
  switch (rule._tag) {
    case "Public":
    case "Any":
      return ALLOWED
    case "Account":
      return grant.full ? ALLOWED : { _tag: "FullAccessRequired", message: rule.message }
    case "Resource": {
      const action = rule.action ?? Scopes.requiredAction(method)
      const own = `${rule.resource}:${action}` as ScopeRequirement
      if (!holds(grant, own)) return { _tag: "InsufficientScope", requiredScope: own }
      for (const extra of rule.also ?? []) {
        if (!holds(grant, extra)) return { _tag: "InsufficientScope", requiredScope: extra }
      }
      return ALLOWED
    }
  }
}

/** The API error of a refusal. */
export const refusal = (decision: Exclude<Decision, { _tag: "Allowed" }>) =>
  decision._tag === "FullAccessRequired"
    ? new FullAccessRequired(decision.message === undefined ? {} : { error: decision.message })
    : new InsufficientScope({
      error: `This key lacks the scope ${decision.requiredScope}`,
      required_scope: decision.requiredScope
    })

/** Fails with `insufficient_scope` unless the caller holds `resource:action` (conditional checks). */
export const requireScope = <R extends Scopes.Resource>(resource: R, action: Scopes.ActionOf<R>) =>
  Effect.flatMap(Effect.service(CurrentPrincipal), (principal) =>
    Scopes.allows(principal.grant, resource, action)
      ? Effect.void
      : Effect.fail(
        new InsufficientScope({
          error: `This key lacks the scope ${resource}:${action}`,
          required_scope: Scopes.requiredScope(resource, action)
        })
      ))

/**
 * Whether the caller may create, update, rotate or delete org secrets (docs/contract.md#secrets-scopes): a user (a
 * session or a user's key, whose scopes the route checks) always; a userless service key only
 * when its exact id is `listed` (`SVC_SECRET_MANAGER_API_KEY_IDS`) and it holds both
 * `secrets:write` and `secrets:use` (`*`, `secrets` and `secrets:*` hold both), whatever else
 * it holds.
 */
export const mayManageSecrets = (principal: Principal, listed: ReadonlySet<string>): boolean =>
  principal.user !== null ||
  (principal.credential.type === "api_key" && listed.has(principal.credential.id) &&
    Scopes.allows(principal.grant, "secrets", "write") && Scopes.allows(principal.grant, "secrets", "use"))

/** Fails with `secret_manager_not_allowed` unless `mayManageSecrets`. */
export const requireSecretManager = (listed: ReadonlySet<string>) =>
  Effect.flatMap(
    Effect.service(CurrentPrincipal),
    (principal) => mayManageSecrets(principal, listed) ? Effect.void : Effect.fail(new SecretManagerNotAllowed())
  )

/** Fails with `full_access_required` unless the caller is a `*` key or a session. */
export const requireFullAccess = Effect.flatMap(
  Effect.service(CurrentPrincipal),
  (principal) => principal.grant.full ? Effect.void : Effect.fail(new FullAccessRequired())
)

/** What the sandbox routes do after `Confinement.sandboxAccess`. */
export type SandboxPermission =
  | { readonly _tag: "Allowed" }
  /** Create the new sandbox as a child of this one (the key's sandbox). */
  | { readonly _tag: "CreateAs"; readonly parentId: SandboxId }

/**
 * The single-sandbox policy of docs/contract.md#single-sandbox-scope (@svc/domain/Confinement) for the current caller. Call
 * it after loading the target sandbox of the caller's org (a sandbox of another org is 404 before
 * this):
 * - `{ id, parentId }` of an existing sandbox: its own sandbox and direct children are allowed;
 * - `{ create: { parentId } }` for POST /v1/sandboxes: allowed as a child of the key's sandbox
 *   (`CreateAs`; `parentId` omitted or equal to it), anything else is refused.
 * Refusals are 403 `sandbox_out_of_scope`. Unconfined credentials are always `Allowed` here
 * (their scopes were checked by the middleware).
 */
export const sandboxPolicy = (target: Confinement.SandboxTarget) =>
  Effect.flatMap(Effect.service(CurrentPrincipal), (principal): Effect.Effect<SandboxPermission, SandboxOutOfScope> => {
    const access = Confinement.sandboxAccess(principal.grant, target)
    switch (access._tag) {
      case "Allowed":
        return Effect.succeed({ _tag: "Allowed" })
      case "CreateAs":
        return Effect.succeed({ _tag: "CreateAs", parentId: access.parentId })
      case "Denied":
        return Effect.fail(new SandboxOutOfScope())
    }
  })

/**
 * For list routes: the sandbox a `sandbox:<id>` caller is confined to (list only it and its
 * direct children, docs/contract.md#listing-sandboxes), or null.
 */
export const confinedSandbox = Effect.map(Effect.service(CurrentPrincipal), (p) => Scopes.sandboxScopeOf(p.grant))

/**
 * The egress ceiling of docs/contract.md#single-sandbox-scope for the current caller: the policy
 * to store, or 403 `egress_beyond_ceiling` naming what goes beyond the ceiling. `ceiling`
 * is read only for a confined caller (the policy of its sandbox); unconfined callers get the
 * requested policy as it is. `kind`: a PUT of the policy, or the policy of a child created.
 */
export const egressPolicy = <E, R>(
  kind: "update" | "child",
  requested: NetworkPolicy,
  ceiling: (sandboxId: SandboxId) => Effect.Effect<NetworkPolicy, E, R>
) =>
  Effect.flatMap(
    Effect.service(CurrentPrincipal),
    (principal): Effect.Effect<NetworkPolicy, E | EgressBeyondCeiling, R> => {
      const confined = Scopes.sandboxScopeOf(principal.grant)
      if (confined === null) return Effect.succeed(requested)
      return Effect.flatMap(ceiling(confined), (limit) => {
        const access = kind === "update"
          ? Confinement.egressUpdate(principal.grant, requested, limit)
          : Confinement.egressOfChild(principal.grant, requested, limit)
        return access._tag === "Allowed"
          ? Effect.succeed(access.policy)
          : Effect.fail(new EgressBeyondCeiling({ error: access.reason }))
      })
    }
  )
