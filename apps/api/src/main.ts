#!/usr/bin/env node
/**
 * The API role as a process of its own (`node apps/api/src/main.ts`, what `svc api` runs):
 * Postgres from DATABASE_URL (migrated), NATS from NATS_URL / SVC_NATS_PREFIX, secrets from
 * SVC_ENCRYPTION_KEYS, listening on SVC_HOST:SVC_PORT. Once it listens it prints one JSON line
 * `{"event":"api_ready","pid":...}` on stdout.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Database from "@svc/db/Database"
import { WorkerHeartbeat } from "@svc/bus/Workers"
import { Effect, Layer } from "effect"
import * as Server from "./Server.ts"

const layer = Layer.mergeAll(Server.layer, WorkerHeartbeat.layer("api")).pipe(
  Layer.provide(SecretBox.layer),
  Layer.provide(Layer.mergeAll(Database.layer, Nats.layer))
)

NodeRuntime.runMain(
  Layer.launch(Layer.tap(layer, () =>
    Effect.sync(() => process.stdout.write(JSON.stringify({ event: "api_ready", pid: process.pid }) + "\n"))))
)
