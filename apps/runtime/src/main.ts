#!/usr/bin/env node
/**
 * The runtime role as a process of its own (`node apps/runtime/src/main.ts`): Postgres from
 * DATABASE_URL (migrated), NATS from NATS_URL / SVC_NATS_PREFIX. Tuning for tests and
 * operators: SVC_ACTOR_ACK_WAIT_MS (how soon a dead process's message comes back, default
 * 30000), SVC_SUPERVISOR_INTERVAL_MS (default 1000), SVC_SANDBOX_TRANSITION_TIMEOUT_S.
 * Prints `runtime ready` on stdout once it consumes.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Nats } from "@svc/bus/Nats"
import * as Database from "@svc/db/Database"
import { Config, Effect, Layer, Option } from "effect"
import * as Runtime from "./Runtime.ts"

const program = Effect.gen(function*() {
  const ackWaitMs = Option.getOrUndefined(yield* Config.option(Config.Int("SVC_ACTOR_ACK_WAIT_MS")))
  const intervalMs = Option.getOrUndefined(yield* Config.option(Config.Int("SVC_SUPERVISOR_INTERVAL_MS")))
  const layer = Runtime.make({
    ...(ackWaitMs !== undefined ? { actors: { ackWait: ackWaitMs } } : {}),
    ...(intervalMs !== undefined ? { supervisor: { intervalMs } } : {})
  }).pipe(Layer.provide(Layer.mergeAll(Database.layer, Nats.layer)))
  yield* Layer.launch(Layer.tap(layer, () => Effect.sync(() => process.stdout.write("runtime ready\n"))))
})

NodeRuntime.runMain(program)
