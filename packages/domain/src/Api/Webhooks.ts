/**
 * The webhook routes (docs/contract.md#webhooks). Account-level: a `*`
 * key or a session. Another org's webhook or delivery is 404.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import {
  DeliveryNotRetryable,
  IdempotencyKeyReused,
  InvalidEventFilter,
  InvalidRequest,
  InvalidWebhookUrl,
  NotFound,
  Unavailable,
  WebhookLimitReached
} from "../Errors.ts"
import { DeliveryId, WebhookId } from "../Ids.ts"
import { ListQuery } from "../Pagination.ts"
import {
  CreatedWebhook,
  CreateWebhookRequest,
  DeliveryList,
  ListDeliveriesQuery,
  PatchWebhookRequest,
  RetryDeliveryResponse,
  TestWebhookResponse,
  Webhook,
  WebhookList
} from "../Webhook.ts"
import { Access } from "./Auth.ts"
import { IdempotencyKey } from "./Sandboxes.ts"

export class CreateWebhookBody
  extends Schema.Class<CreateWebhookBody>("CreateWebhookRequest")(CreateWebhookRequest.fields)
{}

export class PatchWebhookBody
  extends Schema.Class<PatchWebhookBody>("PatchWebhookRequest")(PatchWebhookRequest.fields)
{}

const params = { id: WebhookId }

export class WebhooksApi extends HttpApiGroup.make("webhooks")
  .add(
    HttpApiEndpoint.post("create", "/v1/webhooks", {
      payload: CreateWebhookBody,
      headers: { "idempotency-key": Schema.optionalKey(IdempotencyKey) },
      success: CreatedWebhook.pipe(HttpApiSchema.status(201)),
      error: [
        InvalidRequest,
        InvalidWebhookUrl,
        InvalidEventFilter,
        WebhookLimitReached,
        IdempotencyKeyReused,
        Unavailable
      ]
    }).annotateMerge(OpenApi.annotations({
      description: "Subscribes `url` (http or https, resolving only to public addresses) to `events` (exact event " +
        "names or `*`, default `[\"*\"]`). `secret`: your signing secret (16+ characters), generated when omitted; " +
        "returned once, as `secret_returned_once`. At most 20 webhooks per org. With `Idempotency-Key`, the same key " +
        "and body within 24 h answer the first response again (200); another body is 422 `idempotency_key_reused`."
    })),
    HttpApiEndpoint.get("list", "/v1/webhooks", {
      query: ListQuery,
      success: WebhookList,
      error: [InvalidRequest, Unavailable]
    }).annotateMerge(
      OpenApi.annotations({ description: "The org's webhooks, newest first. Secrets are never listed." })
    ),
    HttpApiEndpoint.get("get", "/v1/webhooks/:id", {
      params,
      success: Webhook,
      error: [NotFound, Unavailable]
    }),
    HttpApiEndpoint.patch("update", "/v1/webhooks/:id", {
      params,
      payload: PatchWebhookBody,
      success: Webhook,
      error: [InvalidRequest, InvalidWebhookUrl, InvalidEventFilter, NotFound, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Changes the fields present. `enabled: false` pauses: deliveries waiting for a retry become " +
        "`dead_letter` at that retry, without a call."
    })),
    HttpApiEndpoint.delete("delete", "/v1/webhooks/:id", {
      params,
      success: HttpApiSchema.NoContent,
      error: [NotFound, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Removes the webhook; its deliveries waiting for a retry become `dead_letter` at that retry."
    })),
    HttpApiEndpoint.post("test", "/v1/webhooks/:id/test", {
      params,
      success: TestWebhookResponse.pipe(HttpApiSchema.status(202)),
      error: [NotFound, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Sends a `ping` event through the real delivery path (same signing and retries, whatever the " +
        "webhook's event filter); read the outcome from the deliveries list."
    })),
    HttpApiEndpoint.get("deliveries", "/v1/webhooks/:id/deliveries", {
      params,
      query: ListDeliveriesQuery,
      success: DeliveryList,
      error: [InvalidRequest, NotFound, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "One row per attempt, newest first; `status` filters (`pending`, `succeeded`, `failed`, " +
        "`dead_letter`, `retried`)."
    })),
    HttpApiEndpoint.post("retry", "/v1/webhooks/:id/deliveries/:delivery_id/retry", {
      params: { id: WebhookId, delivery_id: DeliveryId },
      success: RetryDeliveryResponse.pipe(HttpApiSchema.status(202)),
      error: [NotFound, DeliveryNotRetryable, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Retries a `failed` or `dead_letter` delivery with its attempt counter reset (409 " +
        "`delivery_not_retryable` in any other state)."
    }))
  )
  .annotateMerge(Access.account)
  .annotateMerge(OpenApi.annotations({ title: "Webhooks" }))
{}
