#!/usr/bin/env node
/**
 * The dispatcher role as a process of its own (`node apps/dispatcher/src/main.ts`): the layer of
 * `Dispatcher.ts` (fan-out, delivery workers, heartbeat), configured by DATABASE_URL, NATS_URL,
 * SVC_NATS_PREFIX, SVC_ENCRYPTION_KEYS (required: it opens the sealed signing secrets) and the
 * SVC_WEBHOOK_* variables. Once it pulls jobs it prints one JSON line
 * `{"event":"dispatcher_ready","pid":...}` on stdout. SIGINT/SIGTERM stop it; a job it was
 * attempting comes back to another dispatcher after ack_wait.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import * as Dispatcher from "./Dispatcher.ts"

// The layer is built after the first discovery: the dispatcher pulls from every live webhook's consumer.
const announce = Effect.sync(() =>
  process.stdout.write(JSON.stringify({ event: "dispatcher_ready", pid: process.pid }) + "\n")
)

NodeRuntime.runMain(Layer.launch(Layer.tap(Dispatcher.layer, () => announce)))
