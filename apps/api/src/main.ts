#!/usr/bin/env node
/**
 * The API role as a process of its own (`node apps/api/src/main.ts`): the layer of `Server.ts`,
 * configured by DATABASE_URL, NATS_URL, SVC_NATS_PREFIX, SVC_ENCRYPTION_KEYS (required),
 * SVC_HOST and SVC_PORT and the API's other settings. Once it listens it prints one JSON line
 * `{"event":"api_ready","pid":...}` on stdout. SIGINT/SIGTERM stop it gracefully: the port
 * closes, requests in flight finish (20 s at most), then the process exits.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import * as Server from "./Server.ts"

const announce = Effect.sync(() =>
  process.stdout.write(JSON.stringify({ event: "api_ready", pid: process.pid }) + "\n")
)

NodeRuntime.runMain(Layer.launch(Layer.tap(Server.layer, () => announce)))
