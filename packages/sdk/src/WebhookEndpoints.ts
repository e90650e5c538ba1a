/**
 * `svc.webhooks`: the org's webhook endpoints, their deliveries, tests and retries. (Verifying
 * a delivery on the receiving side is `Webhooks.ts`.)
 */
import { type Http, idempotency, type ListOptions, type Page, segment } from "./Http.ts"
import type * as T from "./Types.ts"

export class Webhooks {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** The answer's `secret_returned_once` is the signing secret, shown this once (`verifyWebhook`). */
  create(
    params: T.CreateWebhookParams,
    options: { readonly idempotencyKey?: string | undefined } = {}
  ): Promise<T.CreatedWebhook> {
    return this.#http.json("POST", "/v1/webhooks", { json: params, headers: idempotency(options) })
  }
  list(options: ListOptions = {}): Promise<Page<"webhooks", T.Webhook>> {
    return this.#http.json("GET", "/v1/webhooks", { query: { ...options } })
  }
  get(webhookId: string): Promise<T.Webhook> {
    return this.#http.json("GET", `/v1/webhooks/${segment(webhookId)}`)
  }
  update(webhookId: string, patch: T.UpdateWebhookParams): Promise<T.Webhook> {
    return this.#http.json("PATCH", `/v1/webhooks/${segment(webhookId)}`, { json: patch })
  }
  async delete(webhookId: string): Promise<void> {
    await this.#http.request("DELETE", `/v1/webhooks/${segment(webhookId)}`)
  }
  /** Sends a `ping` through the real delivery path. */
  test(webhookId: string): Promise<{ readonly delivery_id: string }> {
    return this.#http.json("POST", `/v1/webhooks/${segment(webhookId)}/test`)
  }
  /** Delivery attempts, newest first. */
  deliveries(
    webhookId: string,
    options: ListOptions & { readonly status?: T.DeliveryAttempt["status"] | undefined } = {}
  ): Promise<Page<"deliveries", T.DeliveryAttempt>> {
    return this.#http.json("GET", `/v1/webhooks/${segment(webhookId)}/deliveries`, { query: { ...options } })
  }
  /** Retries a `failed` or `dead_letter` delivery. */
  retry(webhookId: string, deliveryId: string): Promise<{ readonly delivery_id: string; readonly status: string }> {
    return this.#http.json("POST", `/v1/webhooks/${segment(webhookId)}/deliveries/${segment(deliveryId)}/retry`)
  }
}
