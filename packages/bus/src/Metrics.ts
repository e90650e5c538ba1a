/**
 * Queue depths as Prometheus gauges: for each durable consumer of the given streams, the
 * messages not yet delivered (`svc_queue_pending_messages`) and those delivered and not yet
 * acknowledged (`svc_queue_unacked_messages`), labelled by stream and consumer (names without
 * the NATS prefix). Read from JetStream when called: a role runs it at each scrape
 * (`@svc/telemetry/Metrics.collector`), never in between.
 */
import type { ConsumerInfo } from "@nats-io/jetstream"
import { Effect, Metric } from "effect"
import { BusError, Nats } from "./Nats.ts"

export const QueuePending = Metric.gauge("svc_queue_pending_messages", {
  description: "Messages of a JetStream consumer not yet delivered, by stream and consumer"
})

export const QueueUnacked = Metric.gauge("svc_queue_unacked_messages", {
  description: "Messages a JetStream consumer delivered and that are not acknowledged yet, by stream and consumer"
})

/** Reads every consumer of `streams` (base names) and sets both gauges; an absent stream is skipped. */
export const updateQueueDepths = Effect.fn("Bus.updateQueueDepths")(function*(streams: ReadonlyArray<string>) {
  const nats = yield* Nats
  const prefix = nats.name("")
  const base = (name: string) => (prefix !== "" && name.startsWith(prefix) ? name.slice(prefix.length) : name)
  for (const stream of streams) {
    const consumers = yield* Effect.tryPromise({
      try: async () => {
        const all: Array<ConsumerInfo> = []
        for await (const info of nats.jsm.consumers.list(nats.name(stream))) all.push(info)
        return all
      },
      catch: (cause) => new BusError({ operation: `list consumers of ${stream}`, message: String(cause) })
    }).pipe(Effect.catchTag("BusError", () => Effect.succeed([] as ReadonlyArray<ConsumerInfo>)))
    for (const info of consumers) {
      const labels = { stream, consumer: base(info.name) }
      yield* Metric.update(Metric.withAttributes(QueuePending, labels), info.num_pending)
      yield* Metric.update(Metric.withAttributes(QueueUnacked, labels), info.num_ack_pending)
    }
  }
})

/** The same for one consumer (base names): for a process allowed to read only its own (an agent). */
export const updateConsumerDepth = Effect.fn("Bus.updateConsumerDepth")(function*(stream: string, consumer: string) {
  const nats = yield* Nats
  const info = yield* Effect.tryPromise({
    try: () => nats.jsm.consumers.info(nats.name(stream), nats.name(consumer)),
    catch: (cause) => new BusError({ operation: `consumer info ${consumer}`, message: String(cause) })
  })
  const labels = { stream, consumer }
  yield* Metric.update(Metric.withAttributes(QueuePending, labels), info.num_pending)
  yield* Metric.update(Metric.withAttributes(QueueUnacked, labels), info.num_ack_pending)
})
