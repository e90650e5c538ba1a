/**
 * A dispatcher process alone: `node apps/dispatcher/src/main.ts`, configured by DATABASE_URL,
 * NATS_URL, SVC_NATS_PREFIX, SVC_ENCRYPTION_KEYS (required: it opens the sealed signing secrets)
 * and the SVC_WEBHOOK_* variables. Once it pulls jobs it prints one JSON line
 * `{"event":"dispatcher_ready","pid":...}` on stdout. SIGINT/SIGTERM stop it; a job it
 * was attempting comes back to another dispatcher after ack_wait.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Database from "@svc/db/Database"
import { WebhookDispatcher } from "@svc/webhooks/Delivery/Dispatcher"
import { Effect, Layer } from "effect"
import { layer as DispatcherRole } from "./Dispatcher.ts"

const announce = Layer.effectDiscard(
  Effect.gen(function*() {
    // After the first discovery: the dispatcher pulls from every live webhook's consumer.
    yield* WebhookDispatcher
    process.stdout.write(JSON.stringify({ event: "dispatcher_ready", pid: process.pid }) + "\n")
  })
)

const main = announce.pipe(
  Layer.provide(DispatcherRole),
  Layer.provide(Layer.mergeAll(Database.layer, Nats.layer, SecretBox.layer))
)

NodeRuntime.runMain(Layer.launch(main))
