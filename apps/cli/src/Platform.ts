/**
 * The platform's processes as layers, so that `svc dev` can run them all in one process and an
 * operator can run each role alone (`svc api`, `svc runtime`, ...) to scale it by process count.
 */
import { AgentRole } from "@svc/agent/Agent"
import * as ApiServer from "@svc/api/Server"
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Database from "@svc/db/Database"
import * as Dispatcher from "@svc/dispatcher/Dispatcher"
import * as Runtime from "@svc/runtime/Runtime"
import { WorkerHeartbeat } from "@svc/bus/Workers"
import { FanOut } from "@svc/webhooks/Delivery/FanOut"
import { Layer } from "effect"

/** What the roles need: Postgres (migrated) and NATS, from DATABASE_URL and NATS_URL. */
export const Infrastructure = Layer.mergeAll(Database.layer, Nats.layer)

/**
 * The keys that seal and open secret values at rest, from SVC_ENCRYPTION_KEYS. The api (webhook
 * secrets, Idempotency-Key entries, sandboxes' env), the dispatcher (webhook secrets) and the
 * agent (sandboxes' env) refuse to start without them; `svc dev` generates one.
 */
export const Secrets = SecretBox.layer

/** The HTTP API. */
export const ApiRole = Layer.mergeAll(ApiServer.layer, WorkerHeartbeat.layer("api")).pipe(Layer.provide(Secrets))

/** Actors, outbox relay, sandbox supervisor. */
export const RuntimeRole = Runtime.layer

/** Webhooks: fan-out of events to deliveries, and the delivery workers. */
export const DispatcherRole = Layer.mergeAll(FanOut.layer, Dispatcher.layer, WorkerHeartbeat.layer("dispatcher")).pipe(
  Layer.provide(Secrets)
)

/** The host agent of this machine (NATS, and the keys: it opens and seals sandboxes' env). */
export const AgentRoleLayer = AgentRole.layer.pipe(Layer.provide(Secrets))

/** Every role of the platform in one process. */
export const AllRoles = Layer.mergeAll(RuntimeRole, DispatcherRole, AgentRoleLayer, ApiRole)
