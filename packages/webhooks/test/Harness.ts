/**
 * The whole webhook path in one test process, all real: a fresh Postgres database and NATS
 * prefix, the outbox relay, the fan-out, a dispatcher and the API-side `Webhooks` service,
 * configured through the same environment variables production reads.
 */
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import { OutboxRelay } from "@svc/events/Relay"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { testEncryptionKeys } from "@svc/testing/TestSecrets"
import { WebhookSender } from "@svc/webhooks/Delivery/Attempt"
import { FanOut } from "@svc/webhooks/Delivery/FanOut"
import { WebhookDispatcher } from "@svc/webhooks/Delivery/WebhookDispatcher"
import { WebhookAddressGuard } from "@svc/webhooks/Subscriptions/AddressGuard"
import { Webhooks } from "@svc/webhooks/Subscriptions/Webhooks"
import { ConfigProvider, Duration, Layer } from "effect"

/** Short everything, so the ladder runs in seconds. ack_wait stays well above the ladder's waits. */
export const TEST_ENV: Record<string, string> = {
  SVC_ENCRYPTION_KEYS: testEncryptionKeys(),
  SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8",
  SVC_WEBHOOK_RETRY_SCHEDULE: "300ms,300ms,600ms,300ms,300ms",
  SVC_WEBHOOK_ATTEMPT_TIMEOUT: "1s",
  SVC_WEBHOOK_ACK_WAIT: "5s",
  SVC_WEBHOOK_CONCURRENCY: "4",
  SVC_WEBHOOK_DISCOVERY_INTERVAL: "1s"
}
export const TEST_SCHEDULE = [300, 300, 600, 300, 300]

export const webhookStack = (env: Record<string, string> = TEST_ENV) => {
  const guard = WebhookAddressGuard.layer
  const sender = WebhookSender.layer.pipe(Layer.provide(guard))
  const services = Layer.mergeAll(
    Webhooks.layer.pipe(Layer.provide(guard)),
    FanOut.layer,
    WebhookDispatcher.layer.pipe(Layer.provide(sender)),
    OutboxRelay.layerWith({ pollInterval: Duration.millis(200) })
  )
  return services.pipe(
    Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer)),
    Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))
  )
}

export { Nats }
