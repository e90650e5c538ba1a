#!/usr/bin/env node
/**
 * The host agent as a process of its own (`node apps/agent/src/main.ts`): `AgentRole.layer` of
 * `Agent.ts`, configured by NATS_URL, SVC_NATS_PREFIX, SVC_ENCRYPTION_KEYS (required: sandboxes'
 * env comes sealed and is kept sealed on disk) and the SVC_* variables of `Config.ts`. Once it
 * consumes commands it prints one JSON line
 * `{"event":"agent_ready","hostId":...,"endpoint":...,"capacity":...,"limits":...}` on stdout.
 * SIGINT/SIGTERM stop it gracefully (the warm pool is destroyed, sandboxes keep running).
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { SandboxDriver } from "@svc/host/Driver"
import { Effect, Layer } from "effect"
import { AgentRole } from "./Agent.ts"
import { CommandConsumer } from "./Commands.ts"
import { AgentConfig } from "./Config.ts"
import { DataPlaneEndpoint } from "./DataPlaneEndpoint.ts"

const announce = Layer.effectDiscard(
  Effect.gen(function*() {
    const consumer = yield* CommandConsumer
    const config = yield* AgentConfig
    const dataPlane = yield* DataPlaneEndpoint
    const { hostLimits } = yield* SandboxDriver
    yield* Effect.forkScoped(
      Effect.andThen(
        consumer.ready,
        Effect.sync(() => {
          process.stdout.write(
            JSON.stringify({
              event: "agent_ready",
              hostId: config.hostId,
              endpoint: dataPlane.endpoint,
              pid: process.pid,
              capacity: config.capacity,
              limits: hostLimits
            }) + "\n"
          )
        })
      )
    )
  })
)

const main = announce.pipe(Layer.provide(AgentRole.layer))

NodeRuntime.runMain(Layer.launch(main))
