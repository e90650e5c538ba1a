/** Orgs, users and "who am I" (api.md "Sign-up and sessions", "Who am I", "Billing, org"). */
import { Schema } from "effect"
import { OrgId, UserId } from "./Ids.ts"
import { Name } from "./Text.ts"
import { NullableTimestamp, Timestamp } from "./Time.ts"

export const Org = Schema.Struct({
  id: OrgId,
  name: Schema.String,
  createdAt: Timestamp
})
export type Org = typeof Org.Type

/** Body of PATCH /v1/org. */
export const PatchOrgRequest = Schema.Struct({
  name: Name(120)
})
export type PatchOrgRequest = typeof PatchOrgRequest.Type

export const User = Schema.Struct({
  id: UserId,
  email: Schema.String
})
export type User = typeof User.Type

/** Deliberately loose (one @, no spaces, at most 254 characters): the address is not verified. */
export const Email = Schema.String.check(
  Schema.isPattern(/^[^\s@]{1,64}@[^\s@]{1,253}$/, { expected: "an email address" }),
  Schema.isMaxLength(254)
)

export const PASSWORD_MIN = 8
export const PASSWORD_MAX = 1024

export const Password = Schema.String.check(
  Schema.isMinLength(PASSWORD_MIN, { expected: `a password of at least ${PASSWORD_MIN} characters` }),
  Schema.isMaxLength(PASSWORD_MAX)
)

/** Body of POST /v1/auth/sign-up. */
export const SignUpRequest = Schema.Struct({
  email: Email,
  password: Password,
  org_name: Name(120)
})
export type SignUpRequest = typeof SignUpRequest.Type

/** Body of POST /v1/auth/sign-in (any string password: a wrong one is 401, not 400). */
export const SignInRequest = Schema.Struct({
  email: Schema.String.check(Schema.isMaxLength(254)),
  password: Schema.String.check(Schema.isMaxLength(PASSWORD_MAX))
})
export type SignInRequest = typeof SignInRequest.Type

/** Response of sign-up and sign-in. */
export const SessionResponse = Schema.Struct({
  user: User,
  org: Org
})
export type SessionResponse = typeof SessionResponse.Type

export const CredentialType = Schema.Literals(["api_key", "session"])
export type CredentialType = typeof CredentialType.Type

/** Response of GET /v1/me and GET /v1/auth/me. */
export const Me = Schema.Struct({
  org: Schema.Struct({ id: OrgId, name: Schema.String }),
  /** null for a userless service key. */
  user: Schema.NullOr(User),
  credential: Schema.Struct({
    type: CredentialType,
    id: Schema.String,
    /** A session's scopes are `["*"]`. */
    scopes: Schema.Array(Schema.String),
    expiresAt: NullableTimestamp
  })
})
export type Me = typeof Me.Type
