/**
 * Waiting for something asynchronous to become true (a delivery, a state change), never a
 * statement about speed: `observe` is re-run until `check` holds; after `timeout` the test dies
 * with the last observed value, which is the most useful failure message.
 */
import { Duration, Effect } from "effect"

export const eventually = <A, E, R>(
  observe: Effect.Effect<A, E, R>,
  check: (a: A) => boolean,
  timeout: Duration.Input = Duration.seconds(30),
  interval: Duration.Input = Duration.millis(20)
): Effect.Effect<A, E, R> =>
  Effect.gen(function*() {
    const deadline = Date.now() + Duration.toMillis(Duration.fromInputUnsafe(timeout))
    for (;;) {
      const a = yield* observe
      if (check(a)) return a
      if (Date.now() > deadline) {
        return yield* Effect.die(
          new Error(`condition not met in time; last value: ${JSON.stringify(a)?.slice(0, 3000)}`)
        )
      }
      yield* Effect.sleep(interval)
    }
  })
