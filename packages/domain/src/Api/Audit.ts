/**
 * The org's audit log (docs/contract.md#org-and-audit): append-only entries written
 * in the same transaction as the change they record. Not webhook events.
 *
 * Actions: `apikey.created`, `apikey.revoked` (docs/contract.md#key-states), and `org.created`,
 * `org.updated`, `auth.signed_up`, `auth.signed_in`, `auth.sign_in_failed` (a known email with a
 * wrong password), `auth.signed_out`, and `secret.created`, `secret.rotated`, `secret.updated`,
 * `secret.deleted` (the target is the secret's id; an entry never holds a value), and
 * `billing.limits_updated` (the target is the org's id), and `app.created`, `app.updated`,
 * `app.deleted` (the target is the app's id).
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { AuditId } from "../Ids.ts"
import { ListQuery, Page } from "../Pagination.ts"
import { MAX_ID_LENGTH, Truncated } from "../Text.ts"
import { Timestamp } from "../Time.ts"
import { Access } from "./Auth.ts"

export const AUDIT_ACTIONS = [
  "apikey.created",
  "apikey.revoked",
  "org.created",
  "org.updated",
  "auth.signed_up",
  "auth.signed_in",
  "auth.sign_in_failed",
  "auth.signed_out",
  "secret.created",
  "secret.rotated",
  "secret.updated",
  "secret.deleted",
  "billing.limits_updated",
  "app.created",
  "app.updated",
  "app.deleted"
] as const
export const AuditAction = Schema.Literals(AUDIT_ACTIONS)
export type AuditAction = typeof AuditAction.Type

/**
 * Who did it: a user (session), an API key, the operator CLI (`id` null) or nobody signed in
 * (`anonymous`, e.g. a failed sign-in; `id` null).
 */
export const AuditActorType = Schema.Literals(["user", "api_key", "operator", "anonymous"])
export type AuditActorType = typeof AuditActorType.Type
export const AuditActor = Schema.Struct({ type: AuditActorType, id: Schema.NullOr(Truncated(MAX_ID_LENGTH)) })
export type AuditActor = typeof AuditActor.Type

export const AuditEntry = Schema.Struct({
  id: AuditId,
  action: AuditAction,
  actor: AuditActor,
  target_id: Schema.NullOr(Truncated(MAX_ID_LENGTH)),
  ip: Schema.NullOr(Truncated(64)),
  user_agent: Schema.NullOr(Truncated(1024)),
  createdAt: Timestamp
})
export type AuditEntry = typeof AuditEntry.Type

export const AuditQuery = Schema.Struct({
  ...ListQuery.fields,
  action: Schema.optional(AuditAction)
})
export type AuditQuery = typeof AuditQuery.Type

export const AuditPage = Page("entries", AuditEntry)
export type AuditPage = typeof AuditPage.Type

export class AuditApi extends HttpApiGroup.make("audit")
  .add(
    HttpApiEndpoint.get("list", "/v1/audit", { query: AuditQuery, success: AuditPage })
      .annotateMerge(OpenApi.annotations({ description: "Newest first; `action` filters on one action." }))
  )
  .annotateMerge(Access.account)
  .annotateMerge(OpenApi.annotations({ title: "Audit log" }))
{}
