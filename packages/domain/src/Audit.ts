/** The audit log (spec.md 6.5, api.md "Billing, org, audit"). */
import { Schema } from "effect"
import { AuditId } from "./Ids.ts"
import { ListQuery, Page } from "./Pagination.ts"
import { Timestamp } from "./Time.ts"

/** The actions spec.md names. Actions are `<noun>.<verb>` so that more can be added. */
export const AUDIT_ACTIONS = {
  apiKeyCreated: "apikey.created",
  apiKeyRevoked: "apikey.revoked"
} as const

export const AuditAction = Schema.String.check(
  Schema.isPattern(/^[a-z_]{1,40}\.[a-z_]{1,40}$/, { expected: "an action such as apikey.created" })
)

/** Who did it: a user (session or the user's key), a userless key, or the operator CLI. */
export const ActorType = Schema.Literals(["user", "api_key", "operator"])
export type ActorType = typeof ActorType.Type

export const Actor = Schema.Struct({
  type: ActorType,
  /** The user or key id; null for the operator. */
  id: Schema.NullOr(Schema.String)
})
export type Actor = typeof Actor.Type

export const AuditEntry = Schema.Struct({
  id: AuditId,
  action: AuditAction,
  actor: Actor,
  target_id: Schema.NullOr(Schema.String),
  ip: Schema.NullOr(Schema.String),
  user_agent: Schema.NullOr(Schema.String),
  createdAt: Timestamp
})
export type AuditEntry = typeof AuditEntry.Type

export const AuditList = Page("entries", AuditEntry)
export type AuditList = typeof AuditList.Type

/** Query of GET /v1/audit. */
export const ListAuditQuery = Schema.Struct({
  ...ListQuery.fields,
  action: Schema.optionalKey(AuditAction)
})
export type ListAuditQuery = typeof ListAuditQuery.Type
