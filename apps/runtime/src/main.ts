#!/usr/bin/env node
/**
 * The runtime role as a process of its own (`node apps/runtime/src/main.ts`): the layer of
 * `Runtime.ts`, configured by DATABASE_URL, NATS_URL, SVC_NATS_PREFIX and the runtime's
 * settings. Prints `runtime ready` on stdout once it consumes. SIGINT/SIGTERM stop it; messages
 * it held come back to another runtime process.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import * as Runtime from "./Runtime.ts"

NodeRuntime.runMain(
  Layer.launch(Layer.tap(Runtime.layer, () => Effect.sync(() => process.stdout.write("runtime ready\n"))))
)
