/**
 * Delivery jobs on JetStream: the `WEBHOOK_DELIVERY` stream (subjects
 * `whd.<webhookId>.<deliveryId>`, work-queue retention) and ONE durable consumer PER WEBHOOK.
 *
 * Why a consumer per webhook: a job waiting for its next attempt (up to 6 h on the ladder) holds
 * a `max_ack_pending` slot of its consumer the whole time (docs/architecture.md#nats-facts,
 * measured). With one shared consumer, a failing endpoint would fill every slot and stop all
 * deliveries. With a consumer per webhook, a failing endpoint fills only its own budget; every
 * other webhook keeps its own slots, and dispatchers pull from each webhook with a per-webhook
 * concurrency limit, so a slow endpoint holds only its own attempts.
 *
 * The ladder rides on JetStream redelivery with `nak(delay)` and no `backoff` (the two must not
 * be mixed on 2.9): a failed attempt naks with the schedule's wait before the next (attempts are
 * numbered by the database, DeliveryStates.decideClaim), and `max_deliver` 6 stops a job no dispatcher
 * lived to finish. `ack_wait` is separate from the ladder: it is how long a job held by a
 * dispatcher that died stays invisible.
 */
import { AckPolicy, type ConsumerConfig, DeliverPolicy } from "@nats-io/jetstream"
import { BusError, Nats } from "@svc/bus/Nats"
import { ensureStream, type StreamSpec } from "@svc/bus/Topology"
import { DeliveryId, WebhookId } from "@svc/domain/Ids"
import { Effect, Schema } from "effect"
import type { SqlClient } from "effect/sql"
import { MAX_ATTEMPTS } from "./RetrySchedule.ts"

export const DELIVERY_STREAM: StreamSpec = {
  name: "WEBHOOK_DELIVERY",
  subjects: ["whd.>"],
  retention: "workqueue",
  // Longer than the whole ladder (7 h 12 min) with room for a long outage.
  maxAgeMs: 7 * 24 * 3600_000,
  // A fan-out that publishes a job again after a crash does so within its ack_wait.
  duplicateWindowMs: 2 * 60_000
}

/**
 * A job: deliver `delivery_id` (its `round`-th manual retry generation). The fan-out's jobs also
 * carry the event name and the exact body, so that a first attempt needs no read before its
 * call (DeliveryStates.firstAttemptFastPath), and the version of the webhook the event was matched
 * against; jobs written by the API (test, retry) carry ids only and the dispatcher reads the
 * rest with its claim.
 */
export const DeliveryJob = Schema.Struct({
  delivery_id: DeliveryId,
  round: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  event: Schema.optionalKey(Schema.String),
  body: Schema.optionalKey(Schema.String),
  /**
   * The webhook's version when the fan-out matched the event to it: its `updated_at` in
   * microseconds (every create, update and delete sets it). A dispatcher whose copy of the
   * webhook is older does not use it (DeliveryStates.firstAttemptFastPath).
   */
  webhook_version: Schema.optionalKey(Schema.Int)
})
export type DeliveryJob = typeof DeliveryJob.Type

/**
 * The SQL of a webhook's version (`DeliveryJob.webhook_version`) from its `updated_at` column:
 * the fan-out writes it on jobs, dispatchers keep it with their copy of the webhook.
 */
export const webhookVersionSql = (sql: SqlClient.SqlClient, updatedAt: "updated_at" | "w.updated_at") =>
  sql.literal(`(extract(epoch FROM ${updatedAt}) * 1000000)::bigint`)

/** Subject tokens of a job, relative to the process prefix. */
export const jobSubject = (
  webhookId: string,
  deliveryId: string
): ReadonlyArray<string> => ["whd", webhookId, deliveryId]

/** `Nats-Msg-Id` of a job: publishing the same job twice is dropped by the stream. */
export const jobMsgId = (deliveryId: string, round: number) => `${deliveryId}.r${round}`

/** Postgres channel notified when webhooks are created or deleted (dispatchers rescan at once). */
export const WEBHOOKS_CHANNEL = "svc_webhooks"

const CONSUMER_PREFIX = "whd_"

/** The durable consumer of one webhook's jobs (relative to the prefix). */
export const consumerBaseName = (webhookId: string) => `${CONSUMER_PREFIX}${webhookId}`

const isWebhookId = Schema.is(WebhookId)

/** The webhook id of a consumer name (full, prefixed), or null when it is not one of ours. */
export const webhookIdOfConsumer = (nats: Nats["Service"], consumerName: string): WebhookId | null => {
  const prefix = nats.name(CONSUMER_PREFIX)
  if (!consumerName.startsWith(prefix)) return null
  const id = consumerName.slice(prefix.length)
  return isWebhookId(id) ? id : null
}

const nanos = (ms: number) => ms * 1_000_000

export interface ConsumerSettings {
  readonly ackWaitMs: number
  readonly maxAckPending: number
}

/** The consumer configuration of one webhook (full names: prefix applied). */
export const consumerConfig = (
  nats: Nats["Service"],
  webhookId: string,
  settings: ConsumerSettings
): Partial<ConsumerConfig> & { durable_name: string } => ({
  durable_name: nats.name(consumerBaseName(webhookId)),
  filter_subject: nats.subject("whd", webhookId, ">"),
  ack_policy: AckPolicy.Explicit,
  deliver_policy: DeliverPolicy.All,
  ack_wait: nanos(settings.ackWaitMs),
  max_deliver: MAX_ATTEMPTS,
  max_ack_pending: settings.maxAckPending
})

/** Whether an existing consumer matches the settings (else it is updated). */
export const consumerMatches = (existing: ConsumerConfig, settings: ConsumerSettings) =>
  existing.ack_wait === nanos(settings.ackWaitMs) &&
  existing.max_ack_pending === settings.maxAckPending &&
  existing.max_deliver === MAX_ATTEMPTS &&
  (existing.backoff === undefined || existing.backoff.length === 0)

/** Creates the stream when absent; returns its full name. */
export const ensureDeliveryStream = ensureStream(DELIVERY_STREAM)

/** Creates (or brings up to date) the consumer of one webhook. Idempotent; safe concurrently. */
export const ensureWebhookConsumer = Effect.fn("DeliveryJobs.ensureWebhookConsumer")(function*(
  webhookId: string,
  settings: ConsumerSettings
) {
  const nats = yield* Nats
  const stream = nats.name(DELIVERY_STREAM.name)
  const config = consumerConfig(nats, webhookId, settings)
  yield* Effect.tryPromise({
    try: async () => {
      try {
        const info = await nats.jsm.consumers.info(stream, config.durable_name)
        if (!consumerMatches(info.config, settings)) {
          await nats.jsm.consumers.update(stream, config.durable_name, config)
        }
      } catch (e) {
        if (!String(e).includes("not found")) throw e
        await nats.jsm.consumers.add(stream, config)
      }
    },
    catch: (cause) => new BusError({ operation: `ensure consumer ${config.durable_name}`, message: String(cause) })
  })
  return config.durable_name
})

const encoder = new TextEncoder()

/**
 * Publishes a job (direct, acknowledged by the stream, de-duplicated by its msg id). Once per
 * delivery, so untraced: the fan-out's batch (FanOut.processBatch) carries the span.
 */
export const publishJob = Effect.fnUntraced(function*(webhookId: string, job: DeliveryJob) {
  const nats = yield* Nats
  const subject = nats.subject(...jobSubject(webhookId, job.delivery_id))
  yield* nats.publishAcked(subject, encoder.encode(JSON.stringify(job)), {
    msgId: jobMsgId(job.delivery_id, job.round)
  })
})
