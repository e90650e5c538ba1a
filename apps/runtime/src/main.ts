#!/usr/bin/env node
/**
 * The runtime role as a process of its own (`node apps/runtime/src/main.ts`): Postgres from
 * DATABASE_URL (migrated), NATS from NATS_URL / SVC_NATS_PREFIX, tuning as `Runtime.layer`
 * reads it. Prints `runtime ready` on stdout once it consumes.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Nats } from "@svc/bus/Nats"
import * as Database from "@svc/db/Database"
import { Effect, Layer } from "effect"
import * as Runtime from "./Runtime.ts"

const layer = Runtime.layer.pipe(Layer.provide(Layer.mergeAll(Database.layer, Nats.layer)))

NodeRuntime.runMain(Layer.launch(Layer.tap(layer, () => Effect.sync(() => process.stdout.write("runtime ready\n")))))
