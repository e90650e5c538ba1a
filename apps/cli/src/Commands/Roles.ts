/**
 * One role of the platform per process, for operators who scale a role by starting more of it.
 * Each reads DATABASE_URL and NATS_URL (and its own settings) from the environment.
 */
import { Layer } from "effect"
import { Command } from "effect/cli"
import { AgentRoleLayer, ApiRole, DispatcherRole, Infrastructure, RuntimeRole } from "../Platform.ts"
import { Nats } from "@svc/bus/Nats"

const role = <A, E>(name: string, description: string, layer: Layer.Layer<A, E, never>) =>
  Command.make(name, {}, () => Layer.launch(layer)).pipe(Command.withDescription(description))

export const roles = [
  role("api", "Serve the HTTP API on SVC_HOST:SVC_PORT", ApiRole.pipe(Layer.provide(Infrastructure))),
  role("runtime", "Run sandbox actors, the outbox relay and the supervisor", RuntimeRole.pipe(Layer.provide(Infrastructure))),
  role("dispatcher", "Fan events out to webhooks and deliver them", DispatcherRole.pipe(Layer.provide(Infrastructure))),
  role("agent", "Run this machine's host agent (SVC_HOST_ID, SVC_REGION, ...)", AgentRoleLayer.pipe(Layer.provide(Nats.layer)))
]
