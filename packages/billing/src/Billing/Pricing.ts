/**
 * What running time costs, exactly. Prices are integer micros per vCPU-second and per
 * GiB-second; a sandbox's memory is `ram_mb / 1024` GiB. One millisecond of a sandbox then
 * costs `(1024 * cpu * cpuPrice + ram_mb * ramPrice) / 1,024,000` micros: spend is kept in
 * units of 1/1,024,000 micro (`bigint`), so any split of the time into samples adds up to the
 * same total, and micros are only rounded (down) when shown.
 */
export interface Prices {
  readonly cpuMicrosPerSecond: number
  readonly ramGibMicrosPerSecond: number
}

export const UNITS_PER_MICRO = 1_024_000n

/** Units one millisecond of a sandbox of this size costs. */
export const unitsPerMs = (prices: Prices, cpu: number, ramMb: number): bigint =>
  1024n * BigInt(cpu) * BigInt(prices.cpuMicrosPerSecond) + BigInt(ramMb) * BigInt(prices.ramGibMicrosPerSecond)

/** Units `ms` milliseconds of a sandbox of this size cost. */
export const unitsFor = (prices: Prices, cpu: number, ramMb: number, ms: number): bigint =>
  BigInt(ms) * unitsPerMs(prices, cpu, ramMb)

/** Whole micros (rounded down). */
export const toMicros = (units: bigint): bigint => units / UNITS_PER_MICRO
