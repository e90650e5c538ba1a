/**
 * The dispatcher role: webhook delivery workers (@svc/webhooks/Dispatcher). Start as many
 * processes as throughput needs; each pulls from every webhook's consumer with its own
 * per-webhook concurrency. Configured by the SVC_WEBHOOK_* variables (@svc/webhooks/Config) and
 * SVC_WEBHOOK_ALLOWED_SUBNETS; needs Postgres (SqlClient, PgClient), Nats and the SecretBox
 * (SVC_ENCRYPTION_KEYS: it opens the webhooks' sealed signing secrets).
 */
import { WebhookAddressGuard } from "@svc/webhooks/Subscriptions/AddressGuard"
import { WebhookSender } from "@svc/webhooks/Delivery/Attempt"
import { WebhookDispatcher } from "@svc/webhooks/Delivery/Dispatcher"
import { Layer } from "effect"

export const layer = WebhookDispatcher.layer.pipe(
  Layer.provide(WebhookSender.layer),
  Layer.provide(WebhookAddressGuard.layer)
)
