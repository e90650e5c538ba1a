/**
 * The app controller's side of the runtime role: the executor of the controllers' operations,
 * the watch of the replicas' sandbox events and the reconcile round (`Apps/Operations.ts`,
 * `Apps/Watch.ts`). The actors themselves (`AppActor`) run in the runtime's `ActorRuntime` with
 * the sandbox actor. Any number of runtime processes may run it: the executor and the event
 * watch are shared durable consumers, and a round's ticks are deduplicated by id.
 */
import { Duration, Effect, Layer } from "effect"
import { runExecutor } from "./Apps/Operations.ts"
import { runEventWatch, runTicker } from "./Apps/Watch.ts"
import { AppReconcileInterval } from "./Config.ts"

export interface AppControllerOptions {
  /** The reconcile round's pace (default `SVC_APP_RECONCILE_INTERVAL`). */
  readonly interval?: Duration.Input
}

/** Needs `Nats`, `SqlClient`, `Sandboxes`, `Processes` and `SecretBox`. */
export const layer = (options: AppControllerOptions = {}) =>
  Layer.effectDiscard(Effect.gen(function*() {
    const interval = options.interval === undefined
      ? yield* AppReconcileInterval
      : Duration.fromInputUnsafe(options.interval)
    yield* Effect.forkScoped(runExecutor)
    yield* Effect.forkScoped(runEventWatch)
    yield* Effect.forkScoped(runTicker(interval))
  }))
