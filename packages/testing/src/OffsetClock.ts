/**
 * A clock whose wall time a test can move forward (key expiry, session lifetime) while sleeping
 * stays real, so servers keep working in real time.
 */
import { Clock, Effect } from "effect"

export const makeOffsetClock = () => {
  const real = Clock.Clock.defaultValue()
  let offsetMs = 0
  const clock: Clock.Clock = {
    currentTimeMillisUnsafe: () => real.currentTimeMillisUnsafe() + offsetMs,
    currentTimeMillis: Effect.sync(() => real.currentTimeMillisUnsafe() + offsetMs),
    currentTimeNanosUnsafe: () => real.currentTimeNanosUnsafe() + BigInt(offsetMs) * 1_000_000n,
    currentTimeNanos: Effect.sync(() => real.currentTimeNanosUnsafe() + BigInt(offsetMs) * 1_000_000n),
    monotonicTimeNanosUnsafe: () => real.monotonicTimeNanosUnsafe(),
    monotonicTimeNanos: real.monotonicTimeNanos,
    sleep: (duration) => real.sleep(duration)
  }
  return { clock, advance: (ms: number) => void (offsetMs += ms) }
}
