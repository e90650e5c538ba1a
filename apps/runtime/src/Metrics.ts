/**
 * What the runtime adds to `/metrics`, read at each scrape: sandboxes by state
 * (`svc_sandboxes{state}`, every state listed, 0 included), the outbox rows not yet published
 * (`svc_outbox_pending`), and the depth of the queues it feeds or drains (the sandbox actors'
 * mailboxes, the agents' command consumers). Actor messages are counted as they are settled
 * (`svc_actor_messages_total`, @svc/actors/Runtime).
 */
import { streamName } from "@svc/bus/Mailbox"
import { updateQueueDepths } from "@svc/bus/Metrics"
import * as Rows from "@svc/db/Rows"
import { SANDBOX_STATES } from "@svc/domain/Sandbox"
import { OutboxRelay } from "@svc/events/Relay"
import { AGENT_STREAM, SANDBOX_ACTOR_TYPE } from "@svc/host-protocol/Protocol"
import * as Metrics from "@svc/telemetry/Metrics"
import { Effect, Layer, Metric, Schema } from "effect"
import { SqlClient } from "effect/sql"

export const Sandboxes = Metric.gauge("svc_sandboxes", {
  description: "Sandboxes of every org by state (deleted ones are not counted)"
})

export const OutboxPending = Metric.gauge("svc_outbox_pending", {
  description: "Outbox rows committed and not yet published to NATS"
})

const stateRows = Rows.decoder("RuntimeMetrics.sandboxes", Schema.Struct({ state: Schema.String, n: Schema.Int }))

const countSandboxes = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* stateRows(sql`SELECT state, count(*)::int AS n FROM sandboxes GROUP BY state`)
  const counts = new Map(rows.map((r) => [r.state, r.n]))
  for (const state of SANDBOX_STATES) {
    if (state === "deleted") continue
    yield* Metric.update(Metric.withAttributes(Sandboxes, { state }), counts.get(state) ?? 0)
  }
})

const countOutbox = Effect.gen(function*() {
  const relay = yield* OutboxRelay
  yield* Metric.update(OutboxPending, yield* relay.pending)
})

/** The runtime's collectors (needs SqlClient, the relay and Nats). */
export const layer = Layer.mergeAll(
  Metrics.collector("sandboxes", countSandboxes),
  Metrics.collector("outbox", countOutbox),
  Metrics.collector("queues", updateQueueDepths([streamName({ type: SANDBOX_ACTOR_TYPE }), AGENT_STREAM]))
)
