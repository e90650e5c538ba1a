/**
 * Billing periods: calendar months in UTC. Times are ms since the epoch; a period is
 * `[start, end)`.
 */
export interface Period {
  readonly start: number
  readonly end: number
}

/** The period `ms` falls in. */
export const periodOf = (ms: number): Period => {
  const d = new Date(ms)
  return {
    start: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1),
    end: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1)
  }
}

/** `[from, to)` cut where periods end: each piece with its period's start. Empty when `to <= from`. */
export const split = (
  from: number,
  to: number
): ReadonlyArray<{ readonly periodStart: number; readonly ms: number }> => {
  const pieces: Array<{ periodStart: number; ms: number }> = []
  let at = from
  while (at < to) {
    const period = periodOf(at)
    const until = Math.min(to, period.end)
    pieces.push({ periodStart: period.start, ms: until - at })
    at = until
  }
  return pieces
}
