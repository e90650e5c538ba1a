/**
 * Settings of usage metering (Billing/Meter.ts, read by the runtime role): the prices, in integer
 * micros, and how often the meter samples.
 */
import * as Env from "@svc/config/Env"
import { Config, Duration } from "effect"
import type { Prices } from "./Billing/Pricing.ts"

/** Micros per vCPU-second of a running sandbox. */
export const PriceCpu = Env.integer("SVC_PRICE_CPU_MICROS_PER_SECOND", 14, { min: 0, max: 1_000_000_000 })

/** Micros per GiB-second of a running sandbox's memory (`ram_mb / 1024` GiB). */
export const PriceRam = Env.integer("SVC_PRICE_RAM_GIB_MICROS_PER_SECOND", 2, { min: 0, max: 1_000_000_000 })

export const PricesConfig: Config.Config<Prices> = Config.all({
  cpuMicrosPerSecond: PriceCpu,
  ramGibMicrosPerSecond: PriceRam
})

/** How often the meter charges running time and announces crossed thresholds. */
export const MeterInterval = Env.duration("SVC_METER_INTERVAL", Duration.seconds(10), {
  min: Duration.millis(10),
  max: Duration.hours(1)
})

/** What the runtime reads. */
export const settings: ReadonlyArray<Env.AnySetting> = [PriceCpu, PriceRam, MeterInterval]
