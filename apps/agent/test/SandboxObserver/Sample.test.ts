/**
 * A metric sample from the driver's reading, pure: the fields mapped, and `cpu_pct` as CPU time
 * over wall time (percent of one core), 0 without a previous reading or after a counter reset.
 */
import { describe, expect, it } from "@effect/vitest"
import { SandboxStats } from "@svc/host/Driver"
import { sampleOf } from "../../src/SandboxObserver/Sample.ts"

const stats = (cpuUsageNs: number | undefined) =>
  new SandboxStats({
    memoryBytes: 1_000_000,
    pids: 3,
    ...(cpuUsageNs !== undefined ? { cpuUsageNs } : {}),
    netBytesIn: 10,
    netBytesOut: 20,
    memoryLimitBytes: 256 * 1024 ** 2,
    diskBytes: 4096,
    diskLimitBytes: 1024 ** 3
  })

describe("metric samples", () => {
  it("maps the reading's fields", () => {
    const { reading, sample } = sampleOf(stats(5), undefined, Date.parse("2026-01-01T00:00:00Z"))
    expect(sample).toEqual({
      ts: "2026-01-01T00:00:00.000Z",
      cpu_pct: 0,
      mem_bytes: 1_000_000,
      mem_limit_bytes: 256 * 1024 ** 2,
      disk_bytes: 4096,
      disk_limit_bytes: 1024 ** 3,
      pids: 3,
      net_rx_bytes: 10,
      net_tx_bytes: 20
    })
    expect(reading).toEqual({ cpuNs: 5, atMs: Date.parse("2026-01-01T00:00:00Z") })
  })

  const table: ReadonlyArray<readonly [string, number, number, number]> = [
    // name, CPU ns used since, wall ms since, cpu_pct
    ["idle", 0, 5_000, 0],
    ["one core busy", 5_000_000_000, 5_000, 100],
    ["two cores busy", 10_000_000_000, 5_000, 200],
    ["a quarter of a core", 250_000_000, 1_000, 25],
    ["a new run (the counter went back)", -1_000, 5_000, 0],
    ["no time passed", 1_000, 0, 0]
  ]
  for (const [name, usedNs, wallMs, pct] of table) {
    it(name, () => {
      const previous = { cpuNs: 10_000_000_000, atMs: 1_000_000 }
      const { sample } = sampleOf(stats(previous.cpuNs + usedNs), previous, previous.atMs + wallMs)
      expect(sample.cpu_pct).toBe(pct)
    })
  }

  it("without a CPU counter: 0 and no reading", () => {
    const { reading, sample } = sampleOf(stats(undefined), { cpuNs: 1, atMs: 1 }, 5_000)
    expect(sample.cpu_pct).toBe(0)
    expect(reading).toBeUndefined()
  })
})
