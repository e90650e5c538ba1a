/**
 * The pure parts of billing: prices to the micro, periods (calendar months, UTC), the split of a
 * stretch of time at a month's end, the charges of a batch of runs, and which events a standing
 * calls for (each threshold once, re-armed when a limit moves above the spend).
 */
import { describe, expect, it } from "@effect/vitest"
import { chargesOf } from "../src/Billing/Meter.ts"
import { periodOf, split } from "../src/Billing/Period.ts"
import { toMicros, unitsFor } from "../src/Billing/Pricing.ts"
import { evaluate, NOTHING_SENT, type Sent } from "../src/Billing/Thresholds.ts"

const prices = { cpuMicrosPerSecond: 1000, ramGibMicrosPerSecond: 333 }

describe("pricing", () => {
  it("2 vCPU and 768 MiB for 1.234 s at 1000 and 333 micros: 2776 micros (2776.19 rounded down)", () => {
    // 1.234 * (2 * 1000 + 0.75 * 333) = 2776.1925
    expect(toMicros(unitsFor(prices, 2, 768, 1234))).toBe(2776n)
  })

  it("samples of any length add up to the same total: no drift", () => {
    let units = 0n
    for (let i = 0; i < 3_600; i++) units += unitsFor(prices, 1, 100, 1_000)
    // 3600 s of (1000 + 100/1024 * 333) micros = 3600000 + 117070.3125
    expect(toMicros(units)).toBe(3_717_070n)
    expect(units).toBe(unitsFor(prices, 1, 100, 3_600_000))
    // Odd milliseconds: 7 samples of 1 ms and one of 993 ms are one second.
    let odd = 0n
    for (let i = 0; i < 7; i++) odd += unitsFor(prices, 3, 333, 1)
    odd += unitsFor(prices, 3, 333, 993)
    expect(odd).toBe(unitsFor(prices, 3, 333, 1_000))
  })
})

describe("periods", () => {
  it("the calendar month in UTC, February of a leap year included", () => {
    const p = periodOf(Date.parse("2028-02-29T23:59:59.999Z"))
    expect(new Date(p.start).toISOString()).toBe("2028-02-01T00:00:00.000Z")
    expect(new Date(p.end).toISOString()).toBe("2028-03-01T00:00:00.000Z")
    expect(new Date(periodOf(Date.parse("2026-12-31T23:00:00.000Z")).end).toISOString()).toBe(
      "2027-01-01T00:00:00.000Z"
    )
  })

  it("a stretch over a month's end is cut there", () => {
    const end = Date.parse("2026-12-01T00:00:00.000Z")
    expect(split(end - 1500, end + 250)).toEqual([
      { periodStart: Date.parse("2026-11-01T00:00:00.000Z"), ms: 1500 },
      { periodStart: end, ms: 250 }
    ])
    expect(split(end, end)).toEqual([])
  })

  it("a batch's charges: per org and period, ended runs to their end, watermarks to what was charged", () => {
    const end = Date.parse("2026-12-01T00:00:00.000Z")
    const runs = [
      { id: 1n, orgId: "org_b", cpu: 1, ramMb: 1024, meteredUntil: end - 1000, endedAt: null },
      { id: 2n, orgId: "org_a", cpu: 2, ramMb: 0, meteredUntil: end - 5000, endedAt: end - 4000 },
      { id: 3n, orgId: "org_a", cpu: 1, ramMb: 0, meteredUntil: end - 10, endedAt: end - 10 }
    ]
    const { charges, watermarks } = chargesOf(runs, end + 2000, prices)
    expect(charges).toEqual([
      { orgId: "org_a", periodStart: Date.parse("2026-11-01T00:00:00.000Z"), units: unitsFor(prices, 2, 0, 1000) },
      { orgId: "org_b", periodStart: Date.parse("2026-11-01T00:00:00.000Z"), units: unitsFor(prices, 1, 1024, 1000) },
      { orgId: "org_b", periodStart: end, units: unitsFor(prices, 1, 1024, 2000) }
    ])
    expect(watermarks).toEqual([{ id: 1n, until: end + 2000 }, { id: 2n, until: end - 4000 }])
  })
})

describe("thresholds", () => {
  const at = (spend: number, sent: Sent, limit: number | null = 1000, alert: number | null = 300) =>
    evaluate({
      spendMicros: BigInt(spend),
      hardLimitMicros: limit === null ? null : BigInt(limit),
      alertMicros: alert === null ? null : BigInt(alert)
    }, sent)
  const tags = (r: ReturnType<typeof at>) => r.notices.map((n) => (n._tag === "Alert" ? "alert" : `${n.pct}`))

  it("each threshold once, in order, blocked only at 100 %", () => {
    let sent = NOTHING_SENT
    const seen: Array<string> = []
    for (const spend of [0, 299, 300, 499, 500, 799, 800, 850, 900, 999, 1000, 1200]) {
      const r = at(spend, sent)
      seen.push(...tags(r))
      for (const n of r.notices) if (n._tag === "Limit") expect(n.blocked).toBe(n.pct === 100)
      sent = r.sent
    }
    expect(seen).toEqual(["alert", "50", "80", "90", "100"])
  })

  it("a jump past several thresholds announces each; blocked is the org's state", () => {
    const r = at(950, NOTHING_SENT)
    expect(tags(r)).toEqual(["alert", "50", "80", "90"])
    expect(r.notices.every((n) => n._tag === "Alert" || !n.blocked)).toBe(true)
    const over = at(1500, r.sent)
    expect(over.notices).toEqual([{ _tag: "Limit", pct: 100, spendMicros: 1500n, limitMicros: 1000n, blocked: true }])
  })

  it("a limit raised above the spend re-arms the thresholds above it; removing a value re-arms it", () => {
    const full = at(1000, NOTHING_SENT).sent
    const raised = at(1000, full, 1600)
    expect(tags(raised)).toEqual([])
    expect(raised.sent.pcts).toEqual([50])
    expect(tags(at(1300, raised.sent, 1600))).toEqual(["80"])
    const noLimit = at(1000, full, null, null)
    expect(noLimit.sent).toEqual({ pcts: [], alert: false })
    expect(tags(at(1000, noLimit.sent))).toEqual(["alert", "50", "80", "90", "100"])
  })

  it("a limit of 0 is reached at once; large amounts stay exact", () => {
    expect(tags(at(0, NOTHING_SENT, 0, null))).toEqual(["50", "80", "90", "100"])
    const big = 2 ** 53 - 1
    expect(tags(at(big, NOTHING_SENT, big, null))).toEqual(["50", "80", "90", "100"])
    expect(tags(at(big - 1, NOTHING_SENT, big, null))).toEqual(["50", "80", "90"])
  })
})
