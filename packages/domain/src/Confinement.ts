/**
 * The `sandbox:<id>` confinement rule (docs/contract.md#single-sandbox-scope), in one place: a key
 * confined to a sandbox reaches that sandbox and its direct children, nothing above, beside or
 * below them, and creates only children of it; the network policy of its sandbox is the ceiling of
 * every policy it sets or creates. The rule in each form it is applied in:
 * - `confines`: the predicate, on a sandbox's id and parent;
 * - `sandboxAccess`: the decision of a sandbox route (act on one, or create one), as
 *   @svc/auth/Authorization's `sandboxPolicy` applies it;
 * - `sqlCondition`: the same predicate as a condition on the `sandboxes` table, for lists;
 * - `eventVisible`: the same predicate on an event about a sandbox (GET /v1/events);
 * - `egressUpdate`, `egressOfChild`: the egress ceiling.
 * Unconfined grants pass every form (their scopes are checked with `Scopes.allows`).
 */
import { Effect, Result } from "effect"
import type { SqlClient } from "effect/sql"
import * as net from "node:net"
import type { SandboxId } from "./Ids.ts"
import { domainMatches, MAX_RULES, type NetworkPolicy, type ParsedRule, parseRule } from "./Network.ts"
import type { Grant } from "./Scopes.ts"

/** Whether a key confined to `confinedTo` reaches `sandbox`: it is that sandbox or a direct child of it. */
export const confines = (
  confinedTo: string,
  sandbox: { readonly id: string; readonly parentId: string | null }
): boolean => sandbox.id === confinedTo || sandbox.parentId === confinedTo

/**
 * `confines` as a condition on the `sandboxes` table (its `id` and `parent_id` columns), for the
 * lists of a confined key (docs/contract.md#listing-sandboxes).
 */
export const sqlCondition = (sql: SqlClient.SqlClient, confinedTo: string) =>
  sql`(id = ${confinedTo} OR parent_id = ${confinedTo})`

/**
 * Whether an event about a sandbox (its `data.sandbox_id`) is one a key confined to `confinedTo`
 * may see (`confines`); `parentOf` looks the sandbox's parent up, asked only when the event is
 * not about the confining sandbox itself. Unconfined (null): every one.
 */
export const eventVisible = <R>(
  confinedTo: string | null,
  data: Readonly<Record<string, unknown>>,
  parentOf: (sandboxId: string) => Effect.Effect<string | null, never, R>
): Effect.Effect<boolean, never, R> => {
  if (confinedTo === null) return Effect.succeed(true)
  const sandboxId = data["sandbox_id"]
  if (typeof sandboxId !== "string") return Effect.succeed(false)
  if (sandboxId === confinedTo) return Effect.succeed(true)
  return Effect.map(parentOf(sandboxId), (parentId) => confines(confinedTo, { id: sandboxId, parentId }))
}

export type SandboxTarget =
  | { readonly id: string; readonly parentId: string | null }
  | { readonly create: { readonly parentId: string | null } }

export type SandboxAccess =
  | { readonly _tag: "Allowed" }
  | { readonly _tag: "Denied"; readonly code: "sandbox_out_of_scope" }
  /** Create the sandbox with this parent (the confining sandbox). */
  | { readonly _tag: "CreateAs"; readonly parentId: SandboxId }

const ALLOWED: SandboxAccess = { _tag: "Allowed" }
const DENIED: SandboxAccess = { _tag: "Denied", code: "sandbox_out_of_scope" }

/**
 * The decision of a sandbox route. An unconfined grant is always Allowed here (its scopes are
 * checked with `Scopes.allows`). A `sandbox:<id>` grant may act on the sandboxes it `confines`
 * only; it may create only children of its sandbox (parent omitted: CreateAs it).
 */
export const sandboxAccess = (grant: Grant, target: SandboxTarget): SandboxAccess => {
  const scoped = grant.sandboxId
  if (scoped === null) return ALLOWED
  if ("create" in target) {
    const parentId = target.create.parentId
    return parentId === null || parentId === scoped ? { _tag: "CreateAs", parentId: scoped } : DENIED
  }
  return confines(scoped, target) ? ALLOWED : DENIED
}

/**
 * The egress ceiling of a `sandbox:<id>` key (docs/security.md#credentials): the network
 * policy of the sandbox it is confined to bounds every policy the key sets or creates, so the
 * key injected into a sandbox cannot lift its own sandbox's egress nor make children with more.
 * A policy is within a ceiling when it keeps every `deny_out` rule of the ceiling and, if the
 * ceiling's `allow_out` is not empty, its own `allow_out` is not empty either and each of its
 * rules is covered by one of the ceiling's: the same rule, a name under a `*.` rule
 * (`api.example.com` or `*.api.example.com` under `*.example.com`), or a CIDR inside a CIDR.
 * Unconfined credentials have no ceiling here.
 */
export type EgressAccess =
  | { readonly _tag: "Allowed"; readonly policy: NetworkPolicy }
  | { readonly _tag: "Denied"; readonly reason: string }

const parsed = (rule: string): ParsedRule | undefined => Result.getOrUndefined(parseRule(rule))

/** Whether `outer` (a ceiling's allow rule) covers every destination `inner` allows. */
export const ruleCovers = (outer: string, inner: string): boolean => {
  if (outer === inner) return true
  const o = parsed(outer)
  const i = parsed(inner)
  if (o === undefined || i === undefined) return false
  if (o._tag === "Domain" && i._tag === "Domain") {
    if (!o.wildcard) return false
    // `*.example.com` covers any name under it, and `*.` rules under it.
    return domainMatches(`*.${o.name}`, i.name)
  }
  if (o._tag === "Cidr" && i._tag === "Cidr") {
    if (o.family !== i.family || i.prefix < o.prefix) return false
    // Aligned blocks: one no larger than the other is either inside it or outside it whole.
    const block = new net.BlockList()
    block.addSubnet(o.address, o.prefix, o.family === 4 ? "ipv4" : "ipv6")
    return block.check(i.address, i.family === 4 ? "ipv4" : "ipv6")
  }
  return false
}

/** Why `policy` is not within `ceiling`, or undefined when it is. */
export const beyondCeiling = (policy: NetworkPolicy, ceiling: NetworkPolicy): string | undefined => {
  const dropped = ceiling.deny_out.find((rule) => !policy.deny_out.includes(rule))
  if (dropped !== undefined) return `deny_out must keep ${JSON.stringify(dropped)}`
  if (ceiling.allow_out.length === 0) return undefined
  if (policy.allow_out.length === 0) {
    return `allow_out cannot be empty (every address): it is at most ${JSON.stringify(ceiling.allow_out)}`
  }
  const wider = policy.allow_out.find((rule) => !ceiling.allow_out.some((outer) => ruleCovers(outer, rule)))
  return wider === undefined
    ? undefined
    : `allow_out ${JSON.stringify(wider)} is not within ${JSON.stringify(ceiling.allow_out)}`
}

const ceilingMessage = (grant: Grant, reason: string) =>
  `This key is confined to ${grant.sandboxId}, whose network policy is its ceiling: ${reason}`

/**
 * PUT /v1/sandboxes/{id}/network: the requested policy as it is, when the grant is unconfined
 * or the policy is within the ceiling (the confining sandbox's current policy, for itself and
 * for its children alike; so a confined key can narrow its own sandbox, never widen it back).
 */
export const egressUpdate = (grant: Grant, requested: NetworkPolicy, ceiling: NetworkPolicy): EgressAccess => {
  if (grant.sandboxId === null) return { _tag: "Allowed", policy: requested }
  const reason = beyondCeiling(requested, ceiling)
  return reason === undefined
    ? { _tag: "Allowed", policy: requested }
    : { _tag: "Denied", reason: ceilingMessage(grant, reason) }
}

/**
 * POST /v1/sandboxes by a confined key (`CreateAs` its sandbox): the child starts from the
 * ceiling (its parent's policy); the request's `deny_out` rules are added to the ceiling's, and
 * its `allow_out`, when not empty, replaces the ceiling's if each rule is within it (else
 * Denied). Unconfined: the request as it is.
 */
export const egressOfChild = (grant: Grant, requested: NetworkPolicy, ceiling: NetworkPolicy): EgressAccess => {
  if (grant.sandboxId === null) return { _tag: "Allowed", policy: requested }
  const policy: NetworkPolicy = {
    allow_out: requested.allow_out.length === 0 ? ceiling.allow_out : requested.allow_out,
    deny_out: [...ceiling.deny_out, ...requested.deny_out.filter((rule) => !ceiling.deny_out.includes(rule))]
  }
  const reason = policy.deny_out.length > MAX_RULES
    ? `deny_out would hold more than ${MAX_RULES} rules with the ${ceiling.deny_out.length} it keeps`
    : beyondCeiling(policy, ceiling)
  return reason === undefined ? { _tag: "Allowed", policy } : { _tag: "Denied", reason: ceilingMessage(grant, reason) }
}
