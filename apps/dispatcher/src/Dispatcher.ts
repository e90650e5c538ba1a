/**
 * The dispatcher role: the webhook fan-out (events to deliveries and their jobs), the delivery
 * workers (@svc/webhooks/Delivery/WebhookDispatcher), this process's worker heartbeat, the keys that
 * open the webhooks' sealed signing secrets (SVC_ENCRYPTION_KEYS, required), and its Postgres
 * (DATABASE_URL, migrated) and NATS (NATS_URL, SVC_NATS_PREFIX) connections. Its settings: the
 * SVC_WEBHOOK_* variables (Delivery/Config.ts) and SVC_WEBHOOK_ALLOWED_SUBNETS.
 *
 * `layer` is the whole role: what `node apps/dispatcher/src/main.ts`, `svc dispatcher` and
 * `svc dev` run. Start as many processes as throughput needs: the fan-out's durable consumer is
 * shared, and each process pulls from every webhook's consumer with its own per-webhook
 * concurrency.
 */
import { updateQueueDepths } from "@svc/bus/Metrics"
import { Nats } from "@svc/bus/Nats"
import { WorkerHeartbeat } from "@svc/bus/Workers"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Database from "@svc/db/Database"
import * as Streams from "@svc/events/Streams"
import * as Metrics from "@svc/telemetry/Metrics"
import * as Telemetry from "@svc/telemetry/Telemetry"
import { WebhookSender } from "@svc/webhooks/Delivery/Attempt"
import { FanOut } from "@svc/webhooks/Delivery/FanOut"
import { DELIVERY_STREAM } from "@svc/webhooks/Delivery/Jobs"
import { WebhookDispatcher } from "@svc/webhooks/Delivery/WebhookDispatcher"
import { WebhookAddressGuard } from "@svc/webhooks/Subscriptions/AddressGuard"
import { Layer } from "effect"

/** The delivery workers alone, on the caller's connections and keys. */
export const delivery = WebhookDispatcher.layer.pipe(
  Layer.provide(WebhookSender.layer),
  Layer.provide(WebhookAddressGuard.layer)
)

/** The whole role, configured from the environment. */
export const layer = Layer.mergeAll(
  FanOut.layer,
  delivery,
  WorkerHeartbeat.layer("dispatcher"),
  // Queue depths at each scrape: the events the fan-out has yet to read, each webhook's jobs.
  Metrics.collector("queues", updateQueueDepths([Streams.EVENTS.name, DELIVERY_STREAM.name]))
).pipe(
  Layer.provide(SecretBox.layer),
  Layer.provide(Layer.mergeAll(Database.layer, Nats.layer)),
  // Traces, logs and /metrics of the role (svc-dispatcher), for everything above.
  Layer.provide(Telemetry.layer("svc-dispatcher"))
)
