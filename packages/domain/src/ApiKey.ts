/**
 * API key records and requests (spec.md 2.1, 3.1, api.md "API keys"). The secret token format
 * is in ApiKeyToken.ts, the scope grammar in Scopes.ts.
 */
import { DateTime, Effect, Result, Schema } from "effect"
import { InvalidRequest, type InvalidScope } from "./Errors.ts"
import { ApiKeyId } from "./Ids.ts"
import { Page } from "./Pagination.ts"
import { DEFAULT_SCOPES, type Grant, parseScopes } from "./Scopes.ts"
import { Name } from "./Text.ts"
import { NullableTimestamp, Timestamp } from "./Time.ts"

/** A row of the key list; never the token. */
export const ApiKeyRow = Schema.Struct({
  id: ApiKeyId,
  /** `svc_live_` + the first 8 characters of the body. */
  prefix: Schema.String,
  name: Schema.String,
  scopes: Schema.Array(Schema.String),
  createdAt: Timestamp,
  lastUsedAt: NullableTimestamp,
  expiresAt: NullableTimestamp,
  revokedAt: NullableTimestamp
})
export type ApiKeyRow = typeof ApiKeyRow.Type

/** 201 response of POST /v1/auth/api-keys: the row plus the token, shown this once. */
export const CreatedApiKey = Schema.Struct({
  ...ApiKeyRow.fields,
  token: Schema.String
})
export type CreatedApiKey = typeof CreatedApiKey.Type

/** Response of GET /v1/auth/api-keys. */
export const ApiKeyList = Page("keys", ApiKeyRow)
export type ApiKeyList = typeof ApiKeyList.Type

/**
 * Body of POST /v1/auth/api-keys. `scopes` is only an array of strings here: the grammar is
 * checked by `validateCreateApiKey` so that a bad token is `invalid_scope`, not
 * `invalid_request`. `expires_at` null or omitted: never expires.
 */
export const CreateApiKeyRequest = Schema.Struct({
  name: Name(120),
  scopes: Schema.Array(Schema.String).pipe(Schema.withDecodingDefaultKey(Effect.succeed(DEFAULT_SCOPES))),
  expires_at: Schema.NullOr(Timestamp).pipe(Schema.withDecodingDefaultKey(Effect.succeed(null)))
})
export type CreateApiKeyRequest = typeof CreateApiKeyRequest.Type

export interface ValidatedApiKey {
  readonly name: string
  readonly grant: Grant
  readonly expiresAt: DateTime.Utc | null
}

/** The checks of a create request that need more than the schema: scopes and "in the future". */
export const validateCreateApiKey = (
  body: CreateApiKeyRequest,
  now: DateTime.Utc
): Result.Result<ValidatedApiKey, InvalidScope | InvalidRequest> => {
  const grant = parseScopes(body.scopes)
  if (Result.isFailure(grant)) return Result.fail(grant.failure)
  if (body.expires_at !== null && !DateTime.isGreaterThan(body.expires_at, now)) {
    return Result.fail(
      new InvalidRequest({
        error: "expires_at must be in the future",
        issues: [{ path: "expires_at", message: "must be in the future" }]
      })
    )
  }
  return Result.succeed({ name: body.name, grant: grant.success, expiresAt: body.expires_at })
}

export type ApiKeyStatus = "active" | "revoked" | "expired"

/** spec.md 3.1: revoked wins over expired; a key without expiresAt never expires. */
export const apiKeyStatus = (
  key: { readonly revokedAt: DateTime.Utc | null; readonly expiresAt: DateTime.Utc | null },
  now: DateTime.Utc
): ApiKeyStatus =>
  key.revokedAt !== null
    ? "revoked"
    : key.expiresAt !== null && !DateTime.isGreaterThan(key.expiresAt, now)
    ? "expired"
    : "active"
