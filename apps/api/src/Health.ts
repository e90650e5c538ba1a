/**
 * The dependencies' health, probed in the background (every 500 ms) rather than on each request:
 * GET /v1/health then costs no database or bus round trip, and a burst of health checks cannot
 * load Postgres. A state change shows within one probe interval.
 */
import { BusHealth } from "@svc/bus/Nats"
import { DatabaseHealth } from "@svc/db/Database"
import { Context, Duration, Effect, Layer, Ref, Schedule } from "effect"

export interface HealthState {
  readonly postgres: "up" | "down"
  readonly nats: "up" | "down"
}

export const PROBE_INTERVAL = Duration.millis(500)

export class HealthMonitor extends Context.Service<HealthMonitor, {
  readonly current: Effect.Effect<HealthState>
}>()("@svc/api/HealthMonitor") {
  static readonly layer = Layer.effect(
    HealthMonitor,
    Effect.gen(function*() {
      const database = yield* DatabaseHealth
      const bus = yield* BusHealth
      const probe = Effect.all({ postgres: database.check, nats: bus.check }, { concurrency: 2 })
      const state = yield* Ref.make(yield* probe)
      yield* probe.pipe(
        Effect.flatMap((s) => Ref.set(state, s)),
        Effect.repeat(Schedule.spaced(PROBE_INTERVAL)),
        Effect.forkScoped
      )
      return HealthMonitor.of({ current: Ref.get(state) })
    })
  ).pipe(Layer.provide([DatabaseHealth.layer, BusHealth.layer]))
}
