/**
 * The usage meter, in the runtime role: every `SVC_METER_INTERVAL` it charges the running time
 * of every sandbox up to now and stops the running sandboxes of orgs at their hard limit.
 *
 * Exactly once, with any number of meters and any of them killed at any point: a sandbox's
 * stretch of `running` is a row of `billing_runs` (kept by a trigger, migration 0500) with a
 * watermark `metered_until`. A batch locks due runs (`FOR UPDATE SKIP LOCKED`: two meters take
 * different runs), charges `[metered_until, min(now, ended_at))` to the org's period(s)
 * (`Ledger.charge`: spend and events) and moves the watermarks, in one transaction. A meter that
 * dies mid-batch rolls it back and the runs are charged by the next one; a second is never
 * charged twice because the watermark moves in the commit that charges it; a meter whose clock
 * is behind another's finds nothing due before its now.
 *
 * Stopping: the running sandboxes of blocked orgs get `Stop` (message id made of the sandbox
 * and its start, so every meter's copy of it is one message); their actors stop them and emit
 * their state events. A sandbox that was starting when its org was blocked is stopped at the
 * next sample once it runs.
 */
import * as Actors from "@svc/actors/Actors"
import { Nats } from "@svc/bus/Nats"
import { SandboxActor } from "@svc/sandboxes/SandboxActor"
import { Clock, Context, Duration, Effect, Layer, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import { MeterInterval, PricesConfig } from "../Config.ts"
import * as Ledger from "./Ledger.ts"
import { periodOf, split } from "./Period.ts"
import { type Prices, unitsFor } from "./Pricing.ts"
import * as Store from "./Store.ts"

export interface MeterOptions {
  /** Time between two samples (default: `SVC_METER_INTERVAL`, 10 s). */
  readonly intervalMs?: number
  /** Default: `SVC_PRICE_CPU_MICROS_PER_SECOND` and `SVC_PRICE_RAM_GIB_MICROS_PER_SECOND`. */
  readonly prices?: Prices
  /** Runs charged per transaction (default 200). */
  readonly batch?: number
}

export interface Sample {
  /** Runs charged. */
  readonly runs: number
  /** Stop messages sent to sandboxes of blocked orgs. */
  readonly stopped: number
}

/** At most this many batches per sample: a backlog larger than that is finished by the next one. */
const MAX_BATCHES = 50

/** The charges of a batch of runs up to `now`: units per org and period, and the new watermarks. */
export const chargesOf = (runs: ReadonlyArray<Store.Run>, now: number, prices: Prices) => {
  const units = new Map<string, { orgId: string; periodStart: number; units: bigint }>()
  const watermarks: Array<{ id: bigint; until: number }> = []
  for (const run of runs) {
    const until = Math.min(now, run.endedAt ?? now)
    if (until <= run.meteredUntil) continue
    for (const piece of split(run.meteredUntil, until)) {
      const key = `${run.orgId}\u0000${piece.periodStart}`
      const entry = units.get(key) ?? { orgId: run.orgId, periodStart: piece.periodStart, units: 0n }
      entry.units += unitsFor(prices, run.cpu, run.ramMb, piece.ms)
      units.set(key, entry)
    }
    watermarks.push({ id: run.id, until })
  }
  // One lock order for every meter: no two wait on each other's period rows.
  const byKey = [...units.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, v]) => v)
  return { charges: byKey, watermarks }
}

export class Meter extends Context.Service<Meter, {
  /** One sample now (what the loop runs). */
  readonly sample: Effect.Effect<Sample>
}>()("@svc/billing/Meter") {
  static readonly make = Effect.fn("Meter.make")(function*(options: MeterOptions = {}) {
    const sql = yield* SqlClient.SqlClient
    const nats = yield* Nats
    // The clock of the layer's construction, for the loop and for callers of `sample` alike (tests
    // give the meter a clock of theirs).
    const clock = yield* Clock.Clock
    const prices = options.prices ?? (yield* PricesConfig)
    const intervalMs = options.intervalMs ?? Duration.toMillis(yield* MeterInterval)
    const batch = options.batch ?? 200

    const chargeBatch = (now: number) =>
      sql.withTransaction(Effect.gen(function*() {
        const runs = yield* Store.lockDueRuns(now, batch)
        const { charges, watermarks } = chargesOf(runs, now, prices)
        for (const c of charges) yield* Ledger.charge(c.orgId, c.periodStart, c.units)
        yield* Store.advanceRuns(watermarks)
        return runs.length
      }))

    const charge = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      let total = 0
      for (let i = 0; i < MAX_BATCHES; i++) {
        const n = yield* chargeBatch(now)
        total += n
        if (n < batch) break
      }
      return total
    })

    const enforce = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const rows = yield* Store.blockedRunning(periodOf(now).start, 500)
      let sent = 0
      for (const row of rows) {
        sent += yield* Actors.send(SandboxActor, row.id, { _tag: "Stop", reason: "usage_limit" }, {
          msgID: `usage-stop:${row.id}:${row.startedAt}`
        }).pipe(
          Effect.as(1),
          Effect.catchCause((cause) =>
            Effect.as(Effect.logWarning("meter: stop failed", { id: row.id, cause: String(cause) }), 0)
          )
        )
      }
      return sent
    }).pipe(Effect.provideService(Nats, nats))

    // A failed part is logged and tried again at the next sample (nothing of it was committed).
    const warn = <A, E, R>(what: string, effect: Effect.Effect<A, E, R>, fallback: A) =>
      effect.pipe(
        Effect.catchCause((cause) =>
          Effect.as(Effect.logWarning(`meter: ${what} failed`, { cause: String(cause) }), fallback)
        )
      )

    const sample = Effect.gen(function*() {
      const runs = yield* warn("charge", charge, 0)
      const stopped = yield* warn("enforce", enforce, 0)
      return { runs, stopped }
    }).pipe(
      Effect.provideService(SqlClient.SqlClient, sql),
      Effect.provideService(Clock.Clock, clock),
      Effect.withSpan("Meter.sample")
    )

    yield* Effect.forkScoped(Effect.repeat(sample, Schedule.spaced(Duration.millis(intervalMs))))
    return Meter.of({ sample })
  })

  /** Needs `SqlClient` and `Nats`; samples for the layer's lifetime. */
  static readonly layer = (options?: MeterOptions) => Layer.effect(Meter, Meter.make(options))
}
