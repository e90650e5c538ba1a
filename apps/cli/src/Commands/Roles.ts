/**
 * One role of the platform per process, for operators who scale a role by starting more of it:
 * the same layer as the role's `main.ts` (`node apps/<role>/src/main.ts`). Each reads
 * DATABASE_URL and NATS_URL (and its own settings) from the environment.
 */
import { Layer } from "effect"
import { Command } from "effect/cli"
import { AgentRoleLayer, ApiRole, DispatcherRole, RuntimeRole } from "../Platform.ts"

const role = <A, E>(name: string, description: string, layer: Layer.Layer<A, E, never>) =>
  Command.make(name, {}, () => Layer.launch(layer)).pipe(Command.withDescription(description))

export const roles = [
  role("api", "Serve the HTTP API on SVC_HOST:SVC_PORT", ApiRole),
  role("runtime", "Run sandbox actors, the outbox relay and the supervisor", RuntimeRole),
  role("dispatcher", "Fan events out to webhooks and deliver them", DispatcherRole),
  role("agent", "Run this machine's host agent (SVC_HOST_ID, SVC_REGION, ...)", AgentRoleLayer)
]
