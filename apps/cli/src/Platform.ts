/**
 * The platform's roles. Each is defined, whole, in its own app (what it runs, its heartbeat, its
 * configuration and connections): `svc <role>` runs one as its `main.ts` does, `svc dev` runs
 * them all in one process.
 */
import { AgentRole } from "@svc/agent/Agent"
import * as Api from "@svc/api/Server"
import * as Dispatcher from "@svc/dispatcher/Dispatcher"
import * as Runtime from "@svc/runtime/Runtime"
import { Layer } from "effect"

/** apps/api/src/Server.ts: the HTTP API. */
export const ApiRole = Api.layer

/** apps/runtime/src/Runtime.ts: actors, outbox relay, sandbox supervisor. */
export const RuntimeRole = Runtime.layer

/** apps/dispatcher/src/Dispatcher.ts: webhook fan-out and delivery. */
export const DispatcherRole = Dispatcher.layer

/** apps/agent/src/Agent.ts: this machine's host agent. */
export const AgentRoleLayer = AgentRole.layer

/**
 * Every role in one process (`svc dev`), sharing one Postgres pool, one NATS connection and one
 * set of keys. The API comes up last and goes down first: it listens once the roles it hands
 * work to are up, and a stop lets its requests in flight finish before the agent that serves
 * them stops. The agent stops this host's sandboxes when it stops: nothing `svc dev` started
 * outlives it.
 */
export const AllRoles = ApiRole.pipe(
  Layer.provideMerge(Layer.mergeAll(RuntimeRole, DispatcherRole, AgentRole.fromEnv({ stopSandboxesOnStop: true })))
)
