/** `since` of a sandbox's log and metrics: ISO times and durations back from now; anything else refused. */
import { describe, expect, it } from "@effect/vitest"
import { parseSince } from "../src/SandboxTelemetry.ts"

const NOW = Date.parse("2026-06-01T12:00:00Z")

describe("since", () => {
  const accepted: ReadonlyArray<readonly [string, string]> = [
    ["30s", "2026-06-01T11:59:30.000Z"],
    ["15m", "2026-06-01T11:45:00.000Z"],
    ["2h", "2026-06-01T10:00:00.000Z"],
    ["1d", "2026-05-31T12:00:00.000Z"],
    ["0s", "2026-06-01T12:00:00.000Z"],
    ["2026-01-02T03:04:05Z", "2026-01-02T03:04:05.000Z"],
    ["2026-01-02T03:04:05.123Z", "2026-01-02T03:04:05.123Z"],
    ["2026-01-02T03:04:05+02:00", "2026-01-02T01:04:05.000Z"],
    ["2026-01-02", "2026-01-02T00:00:00.000Z"]
  ]
  for (const [text, iso] of accepted) {
    it(`${text} is ${iso}`, () => expect(parseSince(text, NOW)?.toISOString()).toBe(iso))
  }
  for (const text of ["", "yesterday", "-1h", "5x", "1.5h", "2026-13-45T00:00:00Z", "2026-01-02 03:04", "1e3s", "10"]) {
    it(`${JSON.stringify(text)} is refused`, () => expect(parseSince(text, NOW)).toBeUndefined())
  }
})
