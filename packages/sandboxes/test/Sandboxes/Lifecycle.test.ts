/**
 * When the supervisor acts on a sandbox, and why: `Lifecycle.next`/`due`/`dueAt` against a
 * table written out here.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Lifecycle from "../../src/Sandboxes/Lifecycle.ts"

const T = Date.UTC(2026, 10, 28, 0, 0, 0)
const G = Lifecycle.IDLE_GRACE_MS

const base: Lifecycle.DueInputs = {
  state: "running",
  timeoutS: null,
  timeoutFrom: T,
  idleTimeoutS: null,
  lastActivityAt: T,
  busy: false,
  autoDeleteS: null,
  stoppedAt: null
}

describe("Lifecycle", () => {
  it("next: what is due and when, per state and settings", () => {
    const table: ReadonlyArray<readonly [string, Partial<Lifecycle.DueInputs>, Lifecycle.Due | null]> = [
      ["running, nothing set", {}, null],
      ["timeout_s from its start", { timeoutS: 60 }, { kind: "timeout", at: T + 60_000, seen: T }],
      ["timeout_s after a keep-alive", { timeoutS: 60, timeoutFrom: T + 30_000 }, {
        kind: "timeout",
        at: T + 90_000,
        seen: T + 30_000
      }],
      ["idle, with the grace for unreported activity", { idleTimeoutS: 10 }, {
        kind: "idle",
        at: T + 10_000 + G,
        seen: T
      }],
      ["idle from the last activity", { idleTimeoutS: 10, lastActivityAt: T + 5_000 }, {
        kind: "idle",
        at: T + 15_000 + G,
        seen: T + 5_000
      }],
      ["busy is never idle", { idleTimeoutS: 10, busy: true }, null],
      ["busy still has a lifetime", { idleTimeoutS: 10, busy: true, timeoutS: 60 }, {
        kind: "timeout",
        at: T + 60_000,
        seen: T
      }],
      ["the earlier of the two: idle", { idleTimeoutS: 10, timeoutS: 60 }, {
        kind: "idle",
        at: T + 10_000 + G,
        seen: T
      }],
      ["the earlier of the two: timeout", { idleTimeoutS: 100, timeoutS: 60 }, {
        kind: "timeout",
        at: T + 60_000,
        seen: T
      }],
      ["a tie: the lifetime", { idleTimeoutS: 10, timeoutS: 10 + G / 1000 }, {
        kind: "timeout",
        at: T + 10_000 + G,
        seen: T
      }],
      ["never ran (no clock yet)", { idleTimeoutS: 10, lastActivityAt: null, timeoutS: 5, timeoutFrom: null }, null],
      ["stopped, no auto-delete", { state: "stopped", stoppedAt: T }, null],
      ["stopped with auto_delete_s", { state: "stopped", stoppedAt: T, autoDeleteS: 3600, timeoutS: 5 }, {
        kind: "auto_delete",
        at: T + 3_600_000,
        seen: T
      }],
      ["stopping: nothing (its stop is under way)", { state: "stopping", timeoutS: 5, idleTimeoutS: 5 }, null],
      ["error: nothing", { state: "error", timeoutS: 5, autoDeleteS: 5, stoppedAt: T }, null],
      ["starting: nothing", { state: "starting", timeoutS: 5 }, null],
      ["deleted: nothing", { state: "deleted", autoDeleteS: 5, stoppedAt: T }, null]
    ]
    for (const [what, patch, expected] of table) {
      const s = { ...base, ...patch }
      expect(Lifecycle.next(s), what).toEqual(expected)
      expect(Lifecycle.dueAt(s), what).toBe(expected?.at ?? null)
    }
  })

  it("due: only once its time came", () => {
    const s = { ...base, idleTimeoutS: 10 }
    expect(Lifecycle.due(s, T + 10_000)).toBe(null)
    expect(Lifecycle.due(s, T + 10_000 + G - 1)).toBe(null)
    expect(Lifecycle.due(s, T + 10_000 + G)).toEqual({ kind: "idle", at: T + 10_000 + G, seen: T })
  })

  it("expiresAt: only while running with timeout_s", () => {
    expect(Lifecycle.expiresAt({ ...base, timeoutS: 60 })).toBe(T + 60_000)
    expect(Lifecycle.expiresAt(base)).toBe(null)
    expect(Lifecycle.expiresAt({ ...base, timeoutS: 60, state: "stopped" })).toBe(null)
  })
})
