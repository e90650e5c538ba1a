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

export type RoleName = "api" | "runtime" | "dispatcher" | "agent"

/**
 * Every role in one process (`svc dev`), each first passed through `each` (svc dev on its own
 * NATS: each role built apart, on its own NATS user). The API comes up last and goes down first:
 * it listens once the roles it hands work to are up, and a stop lets its requests in flight
 * finish before the agent that serves them stops. The agent stops this host's sandboxes when it
 * stops: nothing `svc dev` started outlives it.
 */
export const allRoles = (
  each: <A, E, R>(role: RoleName, layer: Layer.Layer<A, E, R>) => Layer.Layer<A, E, R>
) =>
  each("api", ApiRole).pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        each("runtime", RuntimeRole),
        each("dispatcher", DispatcherRole),
        each("agent", AgentRole.fromEnv({ stopSandboxesOnStop: true }))
      )
    )
  )

/** Every role in one process, sharing one Postgres pool, one NATS connection and one set of keys. */
export const AllRoles = allRoles((_, layer) => layer)
