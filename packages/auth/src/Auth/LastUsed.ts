/**
 * `lastUsedAt` of API keys, written off the request path: requests note the time in memory and
 * a fiber writes all keys noted since its last pass in one statement every
 * `lastUsedInterval` (so each key is written at most once per interval), and once more when
 * the process stops. The column only moves forward.
 */
import { Context, Duration, Effect, Layer, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import { AuthConfig } from "../Config.ts"

export class LastUsed extends Context.Service<LastUsed, {
  /** Notes a use of the key now; synchronous and allocation-light (the hot path). */
  readonly touch: (keyId: string, nowMs: number) => void
  /** Writes what is pending now (tests, shutdown). */
  readonly flush: Effect.Effect<void>
}>()("@svc/auth/LastUsed") {
  static readonly layer = Layer.effect(
    LastUsed,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const config = yield* AuthConfig
      let pending = new Map<string, number>()

      const touch = (keyId: string, nowMs: number) => {
        const prev = pending.get(keyId)
        if (prev === undefined || prev < nowMs) pending.set(keyId, nowMs)
      }

      const flush = Effect.suspend(() => {
        if (pending.size === 0) return Effect.void
        const batch = pending
        pending = new Map()
        const ids = [...batch.keys()]
        const times = ids.map((id) => new Date(batch.get(id)!).toISOString())
        return sql`
          UPDATE api_keys AS k SET last_used_at = u.used_at
          FROM unnest(${ids}::text[], ${times}::timestamptz[]) AS u (id, used_at)
          WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.used_at)
        `.pipe(
          Effect.asVoid,
          // Lost on a database outage: it is a hint, not a record.
          Effect.catchCause((cause) => Effect.logWarning("could not write lastUsedAt", cause)),
          Effect.withSpan("LastUsed.flush")
        )
      })

      yield* flush.pipe(
        Effect.repeat(Schedule.spaced(config.lastUsedInterval)),
        Effect.forkScoped
      )
      yield* Effect.addFinalizer(() => flush.pipe(Effect.timeout(Duration.seconds(2)), Effect.ignore))
      return LastUsed.of({ touch, flush })
    })
  )
}
