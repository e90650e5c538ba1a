/**
 * Identity and access on the API: who the caller is (`CurrentPrincipal`), what each endpoint
 * lets in (`Access` rules declared on the endpoint or its group), the `Authorization`
 * middleware every endpoint of `Api` goes through, and the auth and API-key routes
 * (docs/contract.md#authentication, #api-keys, #scopes).
 *
 * Declaring access: annotate a group or an endpoint (the endpoint's rule wins) with one of
 * - `Access.public`: no credential (health, sign-up, sign-in); credentials sent are ignored;
 * - `Access.any`: any valid credential, scoped or not (GET /v1/auth/me);
 * - `Access.account`: a `*` key or a session (auth, billing, org, audit, key management);
 * - `Access.resource("sandboxes")`: `<resource>:read` for GET/HEAD, `:write` otherwise;
 *   `{ action }` fixes the action, `{ also: ["secrets:use"] }` adds required scopes.
 * e.g. `HttpApiGroup.make("sandboxes").add(...).annotateMerge(Access.resource("sandboxes"))`.
 * An endpoint without a rule is treated as `Access.account` (fail closed) and fails the
 * authorization matrix test.
 */
import { Context, type DateTime, Schema, SchemaTransformation } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, HttpApiSchema, OpenApi } from "effect/http-api"
import {
  Conflict,
  CsrfRejected,
  FullAccessRequired,
  InsufficientScope,
  InvalidRequest,
  InvalidScope,
  NotFound,
  RateLimited,
  TokenInQueryNotAllowed,
  Unauthenticated,
  Unavailable
} from "../Errors.ts"
import { ApiKeyId, OrgId, UserId } from "../Ids.ts"
import { ListQuery, Page } from "../Pagination.ts"
import { type Action, type Grant, MAX_TOKEN_LENGTH, MAX_TOKENS, type Resource } from "../Scopes.ts"
import { Bounded, codePoints, enforcedMax, IdText, MAX_RECORD_NAME, Name, withoutNul } from "../Text.ts"
import { NullableTimestamp, Timestamp } from "../Time.ts"
import { InfrastructureFailureSchema } from "./Infrastructure.ts"

// ---------------------------------------------------------------------------------------------
// Access rules

export type ScopeRequirement = `${Resource}:${Action}`

export type AccessRule =
  | { readonly _tag: "Public" }
  | { readonly _tag: "Any" }
  | { readonly _tag: "Account"; readonly message?: string | undefined }
  | {
    readonly _tag: "Resource"
    readonly resource: Resource
    /** Fixed action; by default GET and HEAD read and every other method writes. */
    readonly action?: Action | undefined
    /** Further scopes the endpoint needs besides its resource's. */
    readonly also?: ReadonlyArray<ScopeRequirement> | undefined
  }

/** The annotation key of an endpoint's or group's access rule. */
export class AccessAnnotation extends Context.Service<AccessAnnotation, AccessRule>()("@svc/domain/Api/Access") {}

const rule = (value: AccessRule): Context.Context<never> =>
  Context.make(AccessAnnotation, value) as Context.Context<never>

export const Access = {
  public: rule({ _tag: "Public" }),
  any: rule({ _tag: "Any" }),
  account: rule({ _tag: "Account" }),
  /** An account-level route whose refusal message says more (e.g. where scoped keys should go). */
  accountWith: (message: string) => rule({ _tag: "Account", message }),
  resource: (
    resource: Resource,
    options?: { readonly action?: Action; readonly also?: ReadonlyArray<ScopeRequirement> }
  ) => rule({ _tag: "Resource", resource, action: options?.action, also: options?.also })
} as const

/** The rule of an endpoint within its group (endpoint annotation over group annotation). */
export const accessRuleOf = (group: HttpApiGroup.Top, endpoint: HttpApiEndpoint.Top): AccessRule | undefined =>
  Context.getOrUndefined(endpoint.annotations, AccessAnnotation) ??
    Context.getOrUndefined(group.annotations, AccessAnnotation)

// ---------------------------------------------------------------------------------------------
// The principal

export const CredentialType = Schema.Literals(["api_key", "session"])
export type CredentialType = typeof CredentialType.Type

/** What a request's credential resolved to; provided to every non-public endpoint. */
export interface Principal {
  readonly orgId: OrgId
  readonly org: { readonly id: OrgId; readonly name: string }
  /** The user behind a session or a user's key; null for a userless service key. */
  readonly user: { readonly id: UserId; readonly email: string } | null
  readonly credential: {
    readonly type: CredentialType
    /** The key id (`key_...`) or the session id (`ses_...`, never the session token). */
    readonly id: string
    readonly scopes: ReadonlyArray<string>
    readonly expiresAt: DateTime.Utc | null
  }
  readonly grant: Grant
}

export class CurrentPrincipal
  extends Context.Service<CurrentPrincipal, Principal>()("@svc/domain/Api/CurrentPrincipal")
{}

// ---------------------------------------------------------------------------------------------
// Errors of this area added to docs/contract.md#errors

/**
 * A cookie-authenticated request that changes state without an `Origin` of the server's own
 * (docs/contract.md#authentication; the code is ours, docs/contract.md#errors): 403
 * `csrf_rejected`.
 */
export { CsrfRejected }

// ---------------------------------------------------------------------------------------------
// The middleware

const BEARER_SCHEME = {
  description: "`Authorization: Bearer svc_live_...` (or the dashboard's `client.session_token` cookie)",
  type: "http",
  scheme: "Bearer"
} as const

/** The keys of an OpenAPI path item that are operations (the others: parameters, summary, ...). */
const OPERATIONS = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"])

/**
 * Declares the bearer scheme in the OpenAPI document, on every operation (`OpenApi.Transform` of
 * `Api`). Not declared as the middleware's `security`: `HttpApiBuilder` would then decode the
 * header into a `Redacted` and wrap each request in a middleware of its own before ours, which
 * reads the header itself anyway (3 µs of a 25 µs health check in-process, bench/api.ts).
 */
export const declareBearer = (spec: Record<string, any>): Record<string, any> => {
  spec.components = {
    ...spec.components,
    securitySchemes: { ...spec.components?.securitySchemes, bearer: BEARER_SCHEME }
  }
  for (const item of Object.values<Record<string, { security?: unknown }>>(spec.paths ?? {})) {
    for (const [method, operation] of Object.entries(item)) {
      if (OPERATIONS.has(method)) operation.security = [{ bearer: [] }]
    }
  }
  return spec
}

/**
 * Authenticates the request (bearer key, or the `client.session_token` cookie, or `?token=` on
 * /terminal only), enforces CSRF for cookies, the per-address limit of failed credentials, the
 * per-credential rate limit, the endpoint's access rule and the nesting depth of JSON bodies,
 * then provides `CurrentPrincipal`. Applied to every endpoint of `Api`.
 */
export class Authorization extends HttpApiMiddleware.Service<Authorization, { provides: CurrentPrincipal }>()(
  "@svc/domain/Api/Authorization",
  {
    // InvalidRequest: a JSON body nesting too deep is refused here, before the endpoint decodes it.
    // A credential that cannot be checked (the database is down) fails with the infrastructure
    // failure, which the `Infrastructure` middleware around this one answers.
    error: [
      InvalidRequest,
      Unauthenticated,
      TokenInQueryNotAllowed,
      CsrfRejected,
      FullAccessRequired,
      InsufficientScope,
      RateLimited,
      Unavailable,
      InfrastructureFailureSchema
    ]
  }
) {}

export const SESSION_COOKIE = "client.session_token"

// ---------------------------------------------------------------------------------------------
// Records

export const MAX_EMAIL_LENGTH = 254

/** A credential's scopes as stored: valid ones (`Scopes.ts`), so at most 64 of 200 characters each. */
const GrantedScopes = Schema.Array(Bounded(MAX_TOKEN_LENGTH)).check(Schema.isMaxLength(MAX_TOKENS))

/** The who-am-I body of GET /v1/me and GET /v1/auth/me. */
export const WhoAmI = Schema.Struct({
  org: Schema.Struct({ id: OrgId, name: Bounded(MAX_RECORD_NAME) }),
  user: Schema.NullOr(Schema.Struct({ id: UserId, email: Bounded(MAX_EMAIL_LENGTH) })),
  credential: Schema.Struct({
    type: CredentialType,
    id: IdText,
    scopes: GrantedScopes,
    expiresAt: NullableTimestamp
  })
})
export type WhoAmI = typeof WhoAmI.Type

export const User = Schema.Struct({ id: UserId, email: Bounded(MAX_EMAIL_LENGTH), createdAt: Timestamp })
export type User = typeof User.Type

export const OrgRecord = Schema.Struct({ id: OrgId, name: Bounded(MAX_RECORD_NAME), createdAt: Timestamp })
export type OrgRecord = typeof OrgRecord.Type

/** A row of the key list: exactly the fields of docs/contract.md#api-keys. */
export const ApiKeyRow = Schema.Struct({
  id: ApiKeyId,
  prefix: Bounded(64),
  name: Bounded(MAX_RECORD_NAME),
  scopes: GrantedScopes,
  createdAt: Timestamp,
  lastUsedAt: NullableTimestamp,
  expiresAt: NullableTimestamp,
  revokedAt: NullableTimestamp
})
export type ApiKeyRow = typeof ApiKeyRow.Type

/** The mint response: the row plus the secret, shown this once. */
export const CreatedApiKey = Schema.Struct({ ...ApiKeyRow.fields, token: Bounded(256) })
export type CreatedApiKey = typeof CreatedApiKey.Type

export const ApiKeyPage = Page("keys", ApiKeyRow)
export type ApiKeyPage = typeof ApiKeyPage.Type

// ---------------------------------------------------------------------------------------------
// Requests

export const MIN_PASSWORD_LENGTH = 8
export const MAX_PASSWORD_LENGTH = 256

/** Trimmed and lowercased: one account per address whatever the case it is typed in. */
export const normalizeEmail = (email: string): string => email.trim().toLowerCase()

const EMAIL = /^[^\s@]+@[^\s@.][^\s@]*\.[^\s@]+$/

/** An email address, normalised on decoding. */
export const Email = Schema.String.check(Schema.isMaxLength(1024)).pipe(
  Schema.decodeTo(
    Schema.String.check(
      Schema.makeFilter((s: string) =>
        (s.length <= MAX_EMAIL_LENGTH && EMAIL.test(s) && !s.includes("\u0000")) ||
        "an email address (at most 254 characters)", {
        expected: "an email address"
      })
    ),
    SchemaTransformation.transform({ decode: normalizeEmail, encode: (s: string) => s })
  )
)

/** 8 to 256 characters; the message never repeats the value. */
export const Password = Schema.String.check(
  // JSON Schema counts code points, as the check below does.
  enforcedMax(MAX_PASSWORD_LENGTH),
  Schema.makeFilter((s: string) => {
    const n = codePoints(s)
    if (s.includes("\u0000")) return `a password without NUL characters`
    return (n >= MIN_PASSWORD_LENGTH && n <= MAX_PASSWORD_LENGTH) ||
      `a password of ${MIN_PASSWORD_LENGTH} to ${MAX_PASSWORD_LENGTH} characters`
  }, { expected: `a password of ${MIN_PASSWORD_LENGTH} to ${MAX_PASSWORD_LENGTH} characters` })
)

export class SignUpRequest extends Schema.Class<SignUpRequest>("SignUpRequest")({
  email: Email,
  password: Password,
  org_name: Name(120)
}) {}

export class SignInRequest extends Schema.Class<SignInRequest>("SignInRequest")({
  // Not validated beyond being bounded text: a sign-in never says which part was wrong.
  email: Schema.String.check(Schema.isMaxLength(1024), withoutNul),
  password: Schema.String.check(Schema.isMaxLength(1024), withoutNul)
}) {}

export class CreateApiKeyRequest extends Schema.Class<CreateApiKeyRequest>("CreateApiKeyRequest")({
  name: Name(120),
  /** Checked by the scope grammar (400 `invalid_scope`); default `["*"]`. */
  scopes: Schema.optional(Schema.Array(Bounded(1024)).check(Schema.isMaxLength(256))),
  /** Must be in the future; omitted or null: never expires. */
  expires_at: Schema.optional(Schema.NullOr(Timestamp))
}) {}

export const SignedIn = Schema.Struct({ user: User, org: OrgRecord })
export type SignedIn = typeof SignedIn.Type

// ---------------------------------------------------------------------------------------------
// Groups

export class AuthApi extends HttpApiGroup.make("auth")
  .add(
    HttpApiEndpoint.post("signUp", "/v1/auth/sign-up", {
      payload: SignUpRequest,
      success: SignedIn.pipe(HttpApiSchema.status(201)),
      error: Conflict
    }).annotateMerge(Access.public).annotateMerge(OpenApi.annotations({
      description:
        "Creates an org and its first user, and signs in (sets the `client.session_token` cookie). 409 `conflict` when the email is taken."
    })),
    HttpApiEndpoint.post("signIn", "/v1/auth/sign-in", {
      payload: SignInRequest,
      success: SignedIn,
      error: Unauthenticated
    }).annotateMerge(Access.public).annotateMerge(OpenApi.annotations({
      description: "Sets the session cookie. A wrong email and a wrong password are the same 401 `unauthenticated`."
    })),
    HttpApiEndpoint.post("signOut", "/v1/auth/sign-out", {
      success: HttpApiSchema.NoContent
    }).annotateMerge(Access.account).annotateMerge(OpenApi.annotations({
      description: "Ends the session server-side and clears the cookie (with a `*` key: only clears the cookie)."
    })),
    HttpApiEndpoint.get("authMe", "/v1/auth/me", { success: WhoAmI }).annotateMerge(Access.any),
    HttpApiEndpoint.get("me", "/v1/me", { success: WhoAmI }).annotateMerge(
      Access.accountWith("GET /v1/me needs a full-access (\"*\") key or a session; scoped keys use GET /v1/auth/me")
    )
  )
  .annotateMerge(OpenApi.annotations({ title: "Authentication" }))
{}

export class ApiKeysApi extends HttpApiGroup.make("apiKeys")
  .add(
    HttpApiEndpoint.post("create", "/v1/auth/api-keys", {
      payload: CreateApiKeyRequest,
      success: CreatedApiKey.pipe(HttpApiSchema.status(201)),
      error: [InvalidScope, InvalidRequest]
    }).annotateMerge(OpenApi.annotations({
      description: "Mints a key. `token` is in this response only; the platform stores its SHA-256 alone."
    })),
    HttpApiEndpoint.get("list", "/v1/auth/api-keys", {
      query: ListQuery,
      success: ApiKeyPage
    }).annotateMerge(OpenApi.annotations({ description: "The org's keys, newest first, revoked ones included." })),
    HttpApiEndpoint.delete("revoke", "/v1/auth/api-keys/:key_id", {
      params: { key_id: ApiKeyId },
      success: ApiKeyRow,
      error: NotFound
    }).annotateMerge(OpenApi.annotations({
      description: "Revokes at once on every API process; again on a revoked key returns the same row."
    }))
  )
  .annotateMerge(Access.account)
  .annotateMerge(OpenApi.annotations({ title: "API keys" }))
{}
