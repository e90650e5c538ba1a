/**
 * The API's error vocabulary (docs/contract.md#errors).
 *
 * Every class encodes to exactly `{ "error": <message>, "code": <code>, ...details }`: they are
 * `Schema.Error` classes with explicit fields, so no `_tag` is part of the schema or the JSON.
 * `_tag` still exists as a prototype getter so `Effect.catchTag` works, and `message` mirrors
 * `error` so logs read well. Each class carries `httpApiStatus` for HttpApi endpoint `error:`
 * lists and a static `status`.
 *
 * Construction style, uniform for all: `new NotFound()` / `new NotFound({ error: "..." })`;
 * `error` always defaults to a human message, detail fields are required where they exist.
 */
import { type Cause, Effect, Schema, SchemaIssue } from "effect"
import { Truncated } from "./Text.ts"

/** The longest `error` message an answer carries (longer ones are cut). */
export const MAX_ERROR_MESSAGE = 2048
/** The most `issues` an `invalid_request` lists (the first ones). */
export const MAX_ISSUES = 100

/** The `error` field: a message for people, with a per-class default. */
const message = (defaultMessage: string) =>
  Truncated(MAX_ERROR_MESSAGE).pipe(Schema.withConstructorDefault(Effect.succeed(defaultMessage)))

/**
 * Builds the base class of one API error. `Tag` is the class name (used by `catchTag`),
 * `code` the wire code.
 */
const ApiErrorClass =
  <Self>() =>
  <const Tag extends string, const Code extends string, const Fields extends Schema.Struct.Fields = {}>(
    tag: Tag,
    options: {
      readonly code: Code
      readonly status: number
      readonly message: string
      readonly fields?: Fields
    }
  ) => {
    const fields = {
      error: message(options.message),
      code: Schema.tag(options.code),
      ...(options.fields ?? ({} as Fields))
    }
    const Base: Function = Schema.Error<Self>(tag)(fields, {
      httpApiStatus: options.status,
      description: options.message
    }) as Function
    // Not schema fields, so never encoded: `_tag` for `Effect.catchTag`, `message` for logs.
    Object.defineProperty(Base.prototype, "_tag", { get: () => tag, configurable: true })
    Object.defineProperty(Base.prototype, "message", {
      get(this: { readonly error: string }) {
        return this.error
      },
      configurable: true
    })
    Object.assign(Base, { status: options.status, code: options.code })
    // The cast resolves Schema.Error's `[Self] extends [never]` guard, which TypeScript cannot
    // evaluate for a generic `Self` (the subclass always supplies it), and adds the members above.
    return Base as unknown as
      & Schema.Class<Self, Schema.Struct<typeof fields>, Cause.YieldableError & { readonly _tag: Tag }>
      & { readonly status: number; readonly code: Code }
  }

/** One validation problem: `path` is dot-joined (`volumes.0.mount_path`, `""` for the root). */
export const ValidationIssue = Schema.Struct({
  path: Truncated(1024),
  message: Truncated(1024)
})
export type ValidationIssue = typeof ValidationIssue.Type

// 400

export class InvalidRequest extends ApiErrorClass<InvalidRequest>()("InvalidRequest", {
  code: "invalid_request",
  status: 400,
  message: "The request is invalid",
  fields: {
    issues: Schema.Array(ValidationIssue).check(Schema.isMaxLength(MAX_ISSUES)).pipe(
      Schema.withConstructorDefault(Effect.succeed([]))
    )
  }
}) {}

export class InvalidScope extends ApiErrorClass<InvalidScope>()("InvalidScope", {
  code: "invalid_scope",
  status: 400,
  message: "Invalid scope"
}) {}

export class InvalidWebhookUrl extends ApiErrorClass<InvalidWebhookUrl>()("InvalidWebhookUrl", {
  code: "invalid_webhook_url",
  status: 400,
  message: "The webhook url must be http or https and resolve to a public address"
}) {}

export class InvalidEventFilter extends ApiErrorClass<InvalidEventFilter>()("InvalidEventFilter", {
  code: "invalid_event_filter",
  status: 400,
  message: "Event filters must be exact event names or \"*\""
}) {}

export class WebhookLimitReached extends ApiErrorClass<WebhookLimitReached>()("WebhookLimitReached", {
  code: "webhook_limit_reached",
  status: 400,
  message: "An org may have at most 20 webhooks"
}) {}

export class VolumeCapacityAboveMax extends ApiErrorClass<VolumeCapacityAboveMax>()("VolumeCapacityAboveMax", {
  code: "volume_capacity_above_max",
  status: 400,
  message: "The requested volume size is above the maximum",
  fields: {
    requested_gib: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
    max_gib: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
    unit: Schema.tag("GiB")
  }
}) {}

// 401

export class Unauthenticated extends ApiErrorClass<Unauthenticated>()("Unauthenticated", {
  code: "unauthenticated",
  status: 401,
  message: "A valid credential is required"
}) {}

export class TokenInQueryNotAllowed extends ApiErrorClass<TokenInQueryNotAllowed>()("TokenInQueryNotAllowed", {
  code: "token_in_query_not_allowed",
  status: 401,
  message: "Credentials in the ?token= query parameter are only accepted on /terminal; use the Authorization header"
}) {}

// 402

export class UsageLimitReached extends ApiErrorClass<UsageLimitReached>()("UsageLimitReached", {
  code: "usage_limit_reached",
  status: 402,
  message: "The org has reached its hard usage limit"
}) {}

// 403

export class FullAccessRequired extends ApiErrorClass<FullAccessRequired>()("FullAccessRequired", {
  code: "full_access_required",
  status: 403,
  message: "This route requires a full-access (\"*\") key or a session"
}) {}

/**
 * Added to docs/contract.md#errors: a cookie-authenticated request that changes state from another
 * origin.
 */
export class CsrfRejected extends ApiErrorClass<CsrfRejected>()("CsrfRejected", {
  code: "csrf_rejected",
  status: 403,
  message: "Cookie-authenticated requests that change state must carry an Origin header of this server"
}) {}

export class InsufficientScope extends ApiErrorClass<InsufficientScope>()("InsufficientScope", {
  code: "insufficient_scope",
  status: 403,
  message: "The key lacks the scope this request needs",
  fields: { required_scope: Truncated(128) }
}) {}

export class SandboxOutOfScope extends ApiErrorClass<SandboxOutOfScope>()("SandboxOutOfScope", {
  code: "sandbox_out_of_scope",
  status: 403,
  message: "This key is confined to one sandbox and its direct children"
}) {}

/** A `sandbox:<id>` key asking for more egress than its sandbox has (docs/contract.md#snapshots-network-policy-and-exposed-ports). */
export class EgressBeyondCeiling extends ApiErrorClass<EgressBeyondCeiling>()("EgressBeyondCeiling", {
  code: "egress_beyond_ceiling",
  status: 403,
  message: "This key is confined to a sandbox whose network policy is its ceiling: a policy may only narrow it"
}) {}

export class SecretManagerNotAllowed extends ApiErrorClass<SecretManagerNotAllowed>()("SecretManagerNotAllowed", {
  code: "secret_manager_not_allowed",
  status: 403,
  message: "This service key is not allowed to manage org secrets"
}) {}

// 404, 409, 413, 422, 429

export class NotFound extends ApiErrorClass<NotFound>()("NotFound", {
  code: "not_found",
  status: 404,
  message: "Not found"
}) {}

export class Conflict extends ApiErrorClass<Conflict>()("Conflict", {
  code: "conflict",
  status: 409,
  message: "The resource's state does not allow this"
}) {}

export class DeliveryNotRetryable extends ApiErrorClass<DeliveryNotRetryable>()("DeliveryNotRetryable", {
  code: "delivery_not_retryable",
  status: 409,
  message: "Only failed or dead_letter deliveries can be retried"
}) {}

export class PayloadTooLarge extends ApiErrorClass<PayloadTooLarge>()("PayloadTooLarge", {
  code: "payload_too_large",
  status: 413,
  message: "The request body is too large"
}) {}

export class IdempotencyKeyReused extends ApiErrorClass<IdempotencyKeyReused>()("IdempotencyKeyReused", {
  code: "idempotency_key_reused",
  status: 422,
  message: "This Idempotency-Key was used with a different request body"
}) {}

/**
 * Added to docs/contract.md#errors (routes may add codes): the sandbox's own kernel refused a file
 * operation of the file API (a full disk, a read-only file system, /dev/full, /proc/self/mem).
 * `errno` is the error's symbolic name (`ENOSPC`, `EROFS`, `EIO`, `EACCES`, `EPERM`, ...).
 */
export class FileRefused extends ApiErrorClass<FileRefused>()("FileRefused", {
  code: "file_refused",
  status: 422,
  message: "The sandbox's kernel refused the file operation",
  fields: { errno: Truncated(64) }
}) {}

/** `retry_after_s` is in the body too; the server also sends it as the `Retry-After` header. */
export class RateLimited extends ApiErrorClass<RateLimited>()("RateLimited", {
  code: "rate_limited",
  status: 429,
  message: "Too many requests",
  fields: { retry_after_s: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)) }
}) {}

/**
 * An org quota is reached (docs/contract.md#errors: "the message names the quota and its value").
 * `quota` names it for programs (`running_sandboxes`, `sandboxes`), `limit` is its value.
 */
export class QuotaExceeded extends ApiErrorClass<QuotaExceeded>()("QuotaExceeded", {
  code: "quota_exceeded",
  status: 429,
  message: "An org quota is reached",
  fields: { quota: Truncated(128), limit: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)) }
}) {}

/** Added to docs/contract.md#errors: a body in a content type the route does not take (415). */
export class UnsupportedMediaType extends ApiErrorClass<UnsupportedMediaType>()("UnsupportedMediaType", {
  code: "unsupported_media_type",
  status: 415,
  message: "This route does not take a body of this content type; send application/json"
}) {}

// 5xx

/** A preview request whose sandbox port does not answer (nothing listens there, or it went away). */
export class BadGateway extends ApiErrorClass<BadGateway>()("BadGateway", {
  code: "bad_gateway",
  status: 502,
  message: "The sandbox's port did not answer"
}) {}

export class Unavailable extends ApiErrorClass<Unavailable>()("Unavailable", {
  code: "unavailable",
  status: 503,
  message: "A dependency is unavailable; retry"
}) {}

/**
 * Added to docs/contract.md#errors: a create no live host has room for now (or no host is live at
 * all). Refused at once, nothing created; `retry_after_s` is in the body too and the server sends
 * it as `Retry-After`.
 */
export class NoCapacity extends ApiErrorClass<NoCapacity>()("NoCapacity", {
  code: "no_capacity",
  status: 503,
  message: "No host has room for this sandbox now; retry",
  fields: { retry_after_s: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)) }
}) {}

/** A file or archive upload that does not fit the sandbox's `disk_gb`: nothing of it is kept. */
export class InsufficientStorage extends ApiErrorClass<InsufficientStorage>()("InsufficientStorage", {
  code: "insufficient_storage",
  status: 507,
  message: "The upload does not fit the sandbox's disk"
}) {}

/** Never carries internals: the request id is in the `x-request-id` header. */
export class Internal extends ApiErrorClass<Internal>()("Internal", {
  code: "internal",
  status: 500,
  message: "Internal error"
}) {}

/** Every API error class, in the order of docs/contract.md#errors. */
export const API_ERRORS = [
  InvalidRequest,
  InvalidScope,
  InvalidWebhookUrl,
  InvalidEventFilter,
  WebhookLimitReached,
  VolumeCapacityAboveMax,
  Unauthenticated,
  TokenInQueryNotAllowed,
  UsageLimitReached,
  FullAccessRequired,
  CsrfRejected,
  InsufficientScope,
  SandboxOutOfScope,
  EgressBeyondCeiling,
  SecretManagerNotAllowed,
  NotFound,
  Conflict,
  DeliveryNotRetryable,
  PayloadTooLarge,
  UnsupportedMediaType,
  IdempotencyKeyReused,
  FileRefused,
  RateLimited,
  QuotaExceeded,
  BadGateway,
  Unavailable,
  NoCapacity,
  InsufficientStorage,
  Internal
] as const

/** Any API error; decodes a wire body by its `code`. */
export const ApiError = Schema.Union(API_ERRORS)
export type ApiError = typeof ApiError.Type
export type ApiErrorCode = ApiError["code"]

const statusByCode: ReadonlyMap<string, number> = new Map(API_ERRORS.map((c) => [c.code, c.status]))

export const isApiError = (u: unknown): u is ApiError => Schema.is(ApiError)(u)

/** HTTP status of an API error. */
export const statusOf = (e: ApiError): number => statusByCode.get(e.code) ?? 500

const encodeApiError = Schema.encodeSync(ApiError)

/**
 * The plain JSON body and status of an error, for the server's global renderer (errors raised
 * outside endpoints). Anything that is not an ApiError renders as `internal` with no details.
 */
export const errorBody = (e: unknown): {
  readonly status: number
  readonly body: { readonly error: string; readonly code: string; readonly [detail: string]: unknown }
} => {
  const error = isApiError(e) ? e : new Internal()
  return { status: statusOf(error), body: encodeApiError(error) }
}

const standardIssues = SchemaIssue.makeFormatterStandardSchemaV1()

/** Flattens a schema failure into `issues: [{path, message}]` for `invalid_request`. */
export const issuesOf = (issue: SchemaIssue.Issue): Array<ValidationIssue> =>
  standardIssues(issue).issues.slice(0, MAX_ISSUES).map((i) => ({
    path: (i.path ?? []).map((p) => String(typeof p === "object" && p !== null ? p.key : p)).join("."),
    message: i.message
  }))

/** `invalid_request` from a schema failure (`Schema.SchemaError` or a bare issue). */
export const invalidRequestFrom = (
  failure: Schema.SchemaError | SchemaIssue.Issue,
  error = "The request is invalid"
): InvalidRequest =>
  new InvalidRequest({ error, issues: issuesOf(Schema.isSchemaError(failure) ? failure.issue : failure) })
