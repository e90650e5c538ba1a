/**
 * Webhooks and their deliveries (docs/contract.md#webhooks).
 *
 * Request bodies carry `url` and `events` as plain strings: `parseWebhookUrl` and
 * `Events.parseEventFilter` turn bad values into `invalid_webhook_url` / `invalid_event_filter`
 * (not `invalid_request`). Whether the url resolves to a public address is the webhooks
 * package's URL guard, checked at create time and at every attempt.
 */
import { Effect, Result, Schema } from "effect"
import { InvalidWebhookUrl } from "./Errors.ts"
import { EventFilterEntry, EventName, MAX_FILTER_ENTRIES } from "./Events.ts"
import { AttemptId, DeliveryId, WebhookId } from "./Ids.ts"
import { ListQuery, Page } from "./Pagination.ts"
import { Bounded, Truncated, withoutNul } from "./Text.ts"
import { NullableTimestamp, Timestamp } from "./Time.ts"

export const MAX_WEBHOOKS_PER_ORG = 20
/** Longer URLs are refused before parsing: nothing legitimate needs more. */
export const MAX_WEBHOOK_URL_LENGTH = 2048
export const SECRET_MIN = 16
export const SECRET_MAX = 256
/** Attempts per delivery (docs/contract.md#retries). */
export const MAX_ATTEMPTS = 6

export const Webhook = Schema.Struct({
  id: WebhookId,
  url: Bounded(MAX_WEBHOOK_URL_LENGTH),
  events: Schema.Array(EventFilterEntry).check(Schema.isMaxLength(MAX_FILTER_ENTRIES)),
  enabled: Schema.Boolean,
  createdAt: Timestamp,
  updatedAt: Timestamp
})
export type Webhook = typeof Webhook.Type

/** 201 response of POST /v1/webhooks: the record plus the signing secret, shown this once. */
export const CreatedWebhook = Schema.Struct({
  ...Webhook.fields,
  secret_returned_once: Bounded(SECRET_MAX)
})
export type CreatedWebhook = typeof CreatedWebhook.Type

export const WebhookList = Page("webhooks", Webhook)
export type WebhookList = typeof WebhookList.Type

/** The caller's own signing secret: 16 to 256 printable ASCII characters. */
export const WebhookSecret = Schema.String.check(
  Schema.isPattern(/^[\x21-\x7e]*$/, { expected: "printable ASCII without spaces" }),
  Schema.isMinLength(SECRET_MIN, { expected: `at least ${SECRET_MIN} characters` }),
  Schema.isMaxLength(SECRET_MAX)
)

/**
 * `events` of a create or patch as decoding bounds it; the filter's own check (`parseFilter`)
 * then refuses past `MAX_FILTER_ENTRIES` names with `invalid_event_filter`.
 */
const EventsInput = Schema.Array(Bounded(128)).check(Schema.isMaxLength(256))

/** Body of POST /v1/webhooks. */
export const CreateWebhookRequest = Schema.Struct({
  url: Bounded(MAX_WEBHOOK_URL_LENGTH).check(withoutNul),
  events: EventsInput.pipe(Schema.withDecodingDefaultKey(Effect.succeed(["*"]))),
  /** Omitted: the platform generates one. */
  secret: Schema.optionalKey(WebhookSecret),
  enabled: Schema.Boolean.pipe(Schema.withDecodingDefaultKey(Effect.succeed(true)))
})
export type CreateWebhookRequest = typeof CreateWebhookRequest.Type

/** Body of PATCH /v1/webhooks/{id}: only the fields present change. */
export const PatchWebhookRequest = Schema.Struct({
  url: Schema.optionalKey(Bounded(MAX_WEBHOOK_URL_LENGTH).check(withoutNul)),
  events: Schema.optionalKey(EventsInput),
  enabled: Schema.optionalKey(Schema.Boolean)
})
export type PatchWebhookRequest = typeof PatchWebhookRequest.Type

/**
 * The syntax half of the URL rule: absolute http or https, a host, no credentials, no
 * fragment, at most 2048 characters. Returns the parsed URL (`href` is its normalized form).
 */
export const parseWebhookUrl = (input: string): Result.Result<URL, InvalidWebhookUrl> => {
  const fail = (why: string) => Result.fail(new InvalidWebhookUrl({ error: `Invalid webhook url: ${why}` }))
  if (input.length === 0) return fail("empty")
  if (input.length > MAX_WEBHOOK_URL_LENGTH) return fail(`longer than ${MAX_WEBHOOK_URL_LENGTH} characters`)
  if (input.trim() !== input) return fail("leading or trailing whitespace")
  let url: URL
  try {
    url = new URL(input)
  } catch {
    return fail("not an absolute URL")
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return fail("the scheme must be http or https")
  if (url.hostname.length === 0) return fail("no host")
  if (url.username !== "" || url.password !== "") return fail("credentials in the URL are not allowed")
  if (url.hash !== "" || input.includes("#")) return fail("fragments are not allowed")
  return Result.succeed(url)
}

/** A delivery's status (docs/contract.md#delivery-states): where its current round stands. */
export const DELIVERY_STATUSES = ["pending", "succeeded", "failed", "dead_letter"] as const
export const DeliveryStatus = Schema.Literals(DELIVERY_STATUSES)
export type DeliveryStatus = typeof DeliveryStatus.Type

/**
 * An attempt's status, what a row of the deliveries list shows (docs/contract.md#deliveries: a
 * row is one attempt): a delivery's statuses plus `retried`, the attempt a manual retry revived.
 */
export const ATTEMPT_STATUSES = [...DELIVERY_STATUSES, "retried"] as const
export const AttemptStatus = Schema.Literals(ATTEMPT_STATUSES)
export type AttemptStatus = typeof AttemptStatus.Type

/**
 * docs/contract.md#delivery-states: only failed and dead_letter deliveries can be retried by hand.
 */
export const isRetryable = (status: DeliveryStatus): boolean => status === "failed" || status === "dead_letter"

/** One delivery attempt, a row of GET /v1/webhooks/{id}/deliveries. */
export const DeliveryAttempt = Schema.Struct({
  id: AttemptId,
  delivery_id: DeliveryId,
  event: EventName,
  attempt: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: MAX_ATTEMPTS })),
  status: AttemptStatus,
  /** null when no response arrived (timeout, connection error) or not yet attempted. */
  response_code: Schema.NullOr(Schema.Int),
  error: Schema.NullOr(Truncated(1024)),
  duration_ms: Schema.NullOr(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))),
  createdAt: Timestamp,
  next_attempt_at: NullableTimestamp
})
export type DeliveryAttempt = typeof DeliveryAttempt.Type

export const DeliveryList = Page("deliveries", DeliveryAttempt)
export type DeliveryList = typeof DeliveryList.Type

/** Query of GET /v1/webhooks/{id}/deliveries. */
export const ListDeliveriesQuery = Schema.Struct({
  ...ListQuery.fields,
  status: Schema.optionalKey(AttemptStatus)
})
export type ListDeliveriesQuery = typeof ListDeliveriesQuery.Type

/** 202 response of POST /v1/webhooks/{id}/test. */
export const TestWebhookResponse = Schema.Struct({ delivery_id: DeliveryId })

/** 202 response of POST /v1/webhooks/{id}/deliveries/{delivery_id}/retry. */
export const RetryDeliveryResponse = Schema.Struct({
  delivery_id: DeliveryId,
  status: Schema.Literal("retried")
})
