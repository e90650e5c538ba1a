/**
 * The runtime role: hosts the sandbox actor (its 16 mailbox partitions), the outbox relay, the
 * sandbox supervisor (hosts down, transitions that take too long, `timeout_s` lifetimes), the
 * usage meter (@svc/billing), the app controllers (@svc/apps: their actors, the executor of
 * their operations, the watch of their replicas) and this process's worker heartbeat. Run as many runtime processes
 * as wanted: they share the partitions (one message per partition in flight across all of
 * them), the relay batches (one relay publishes at a time), the supervisor's messages
 * (deduplicated by id) and the meter's runs (each charged by one of them, once).
 *
 * `layer` is the whole role, configured from the environment with its Postgres (DATABASE_URL,
 * migrated) and NATS (NATS_URL, SVC_NATS_PREFIX) connections: what `node
 * apps/runtime/src/main.ts`, `svc runtime` and `svc dev` run. `make` is the same role with
 * options, on connections given by the caller (tests).
 */
import { ActorRuntime, type ActorRuntimeOptions as ActorOptions } from "@svc/actors/Runtime"
import { AppActor } from "@svc/apps/AppActor"
import * as AppController from "@svc/apps/AppController"
import { ensureOperationsStream } from "@svc/apps/Apps/Operations"
import { Billing } from "@svc/billing/Billing"
import { Meter, type MeterOptions } from "@svc/billing/Billing/Meter"
import { Nats } from "@svc/bus/Nats"
import { type HeartbeatOptions, WorkerHeartbeat } from "@svc/bus/Workers"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Database from "@svc/db/Database"
import { OutboxRelay, type RelayOptions } from "@svc/events/Relay"
import * as Events from "@svc/events/Streams"
import { ensureAgentStream, Hosts } from "@svc/hosts/Hosts"
import { LifecycleLog } from "@svc/sandboxes/LifecycleLog"
import { Processes } from "@svc/sandboxes/Processes"
import { SandboxActor } from "@svc/sandboxes/SandboxActor"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { SandboxSupervisor, type SupervisorOptions } from "@svc/sandboxes/Sandboxes/Supervisor"
import * as Telemetry from "@svc/telemetry/Telemetry"
import { Effect, Layer } from "effect"
import { ActorAckWait } from "./Config.ts"
import * as RuntimeMetrics from "./Metrics.ts"

export interface RuntimeOptions {
  readonly actors?: ActorOptions
  readonly relay?: RelayOptions
  readonly supervisor?: SupervisorOptions
  /** `false`: no usage meter (tests that run meters of their own, on a clock of theirs). */
  readonly meter?: MeterOptions | false
  /** `false`: no worker heartbeat (tests that count workers). */
  readonly heartbeat?: HeartbeatOptions | false
  /** The app controller's executor, event watch and reconcile round; `false`: none. */
  readonly apps?: AppController.AppControllerOptions | false
  /** `false`: no lifecycle lines in sandboxes' logs (nor purge of a deleted one's logs and metrics). */
  readonly lifecycleLog?: false
}

/**
 * The app controller with the services its replicas are made through: sandboxes as the API
 * makes them (a blocked org's creates refused), processes, and the key that opens apps' env
 * (`SVC_ENCRYPTION_KEYS`).
 */
const appController = (options: AppController.AppControllerOptions) =>
  AppController.layer(options).pipe(
    Layer.provide(Processes.layer),
    Layer.provideMerge(Sandboxes.layer),
    Layer.provide(Billing.gate),
    Layer.provide(SecretBox.layer)
  )

/** The streams the runtime publishes to, before anything publishes. */
export const Topology = Layer.effectDiscard(Effect.gen(function*() {
  yield* Events.ensure()
  yield* ensureAgentStream()
  yield* ensureOperationsStream()
}))

/** The role on connections of the caller's: needs `SqlClient` + `PgClient` (migrated) and `Nats`. */
export const make = (options: RuntimeOptions = {}) => {
  const relay = options.relay === undefined ? OutboxRelay.layer : OutboxRelay.layerWith(options.relay)
  return Layer.mergeAll(
    // The actors wake the relay of this process after each commit (one relay: the layer is shared).
    ActorRuntime.layer([SandboxActor, AppActor], options.actors).pipe(Layer.provide(relay)),
    relay,
    SandboxSupervisor.layer(options.supervisor),
    options.meter === false ? Layer.empty : Meter.layer(options.meter),
    options.heartbeat === false ? Layer.empty : WorkerHeartbeat.layer("runtime", options.heartbeat),
    options.apps === false ? Layer.empty : appController(options.apps ?? {}),
    options.lifecycleLog === false ? Layer.empty : LifecycleLog
  ).pipe(
    Layer.provide(Hosts.layer),
    Layer.provide(Topology)
  )
}

/**
 * The runtime role configured from the environment (`Config.ts`): `SVC_ACTOR_ACK_WAIT`; the
 * supervisor reads `SVC_SUPERVISOR_INTERVAL` and `SVC_SANDBOX_TRANSITION_TIMEOUT` itself, the
 * meter `SVC_METER_INTERVAL` and the prices.
 * With its connections, its telemetry (@svc/telemetry) and its metrics' collectors (Metrics.ts).
 */
export const layer = Layer.unwrap(Effect.map(ActorAckWait, (ackWait) => {
  const role = make({ actors: { ackWait } })
  return Layer.merge(role, RuntimeMetrics.layer.pipe(Layer.provide(role)))
})).pipe(
  Layer.provide(Layer.mergeAll(Database.layer, Nats.layer)),
  // Traces, logs and /metrics of the role (svc-runtime), for everything above.
  Layer.provide(Telemetry.layer("svc-runtime"))
)
