import { describe, expect, it } from "@effect/vitest"
import { DateTime, Schema } from "effect"
import { formatTimestamp, NullableTimestamp, Timestamp } from "../src/Time.ts"
import { ok, refusedAt } from "./helpers.ts"

describe("Time", () => {
  it("encodes ISO 8601 UTC with milliseconds", () => {
    const t = DateTime.makeUnsafe(Date.UTC(2026, 10, 22, 1, 2, 3, 456))
    expect(Schema.encodeSync(Timestamp)(t)).toBe("2026-11-22T01:02:03.456Z")
    expect(Schema.encodeSync(Timestamp)(DateTime.makeUnsafe(Date.UTC(2026, 0, 1)))).toBe("2026-01-01T00:00:00.000Z")
    expect(formatTimestamp(0)).toBe("1970-01-01T00:00:00.000Z")
    expect(Schema.encodeSync(NullableTimestamp)(null)).toBeNull()
  })

  it("decodes strict ISO 8601 date-times, normalizing offsets to UTC", () => {
    const enc = Schema.encodeSync(Timestamp)
    expect(enc(ok(Timestamp, "2026-11-22T01:02:03.456Z"))).toBe("2026-11-22T01:02:03.456Z")
    expect(enc(ok(Timestamp, "2026-11-22T01:02:03Z"))).toBe("2026-11-22T01:02:03.000Z")
    expect(enc(ok(Timestamp, "2026-11-22T03:02:03.456+02:00"))).toBe("2026-11-22T01:02:03.456Z")
    expect(enc(ok(Timestamp, "2024-02-29T00:00:00Z"))).toBe("2024-02-29T00:00:00.000Z")
  })

  it("refuses anything else", () => {
    for (
      const bad of [
        "",
        "2026-11-22",
        "2026-11-22T01:02Z",
        "2026-11-22T01:02:03",
        "2026-11-22 01:02:03Z",
        "2026-02-31T00:00:00Z",
        "2025-02-29T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-11-22T24:00:00Z",
        "Sun, 22 Nov 2026 01:02:03 GMT",
        "1763773323456",
        " 2026-11-22T01:02:03Z",
        1763773323456,
        null
      ]
    ) {
      expect(refusedAt(Timestamp, bad), String(bad)).toEqual([""])
    }
  })
})
