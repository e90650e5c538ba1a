/**
 * A host's view of its sandboxes' activity: `report` (what to tell the control plane) against a
 * table written out here, and `SandboxActivity` on a clock the test moves.
 */
import { describe, expect, it } from "@effect/vitest"
import { type ActivityEntry, report, SandboxActivity } from "../src/Activity.ts"

const entry = (patch: Partial<ActivityEntry>): ActivityEntry => ({
  lastMs: null,
  inFlight: 0,
  quiet: new Set(),
  reportedBusy: false,
  reportedLastMs: null,
  ...patch
})

describe("Activity", () => {
  it("report: a change of busy, or activity since the last report; nothing otherwise", () => {
    const table: ReadonlyArray<
      readonly [string, Partial<ActivityEntry>, boolean, ReturnType<typeof report>]
    > = [
      ["never seen anything", {}, false, undefined],
      ["a call in progress", { lastMs: 100, inFlight: 1 }, false, { busy: true, idleMs: 0 }],
      ["still in progress, reported", { lastMs: 100, inFlight: 1, reportedBusy: true }, false, undefined],
      ["a background process runs", { lastMs: 100 }, true, { busy: true, idleMs: 0 }],
      ["busy ended", { lastMs: 900, reportedBusy: true, reportedLastMs: 100 }, false, { busy: false, idleMs: 100 }],
      ["a call since the last report", { lastMs: 900, reportedLastMs: 100 }, false, { busy: false, idleMs: 100 }],
      ["nothing since the last report", { lastMs: 900, reportedLastMs: 900 }, false, undefined],
      [
        "busy, more calls: still just busy",
        { lastMs: 950, inFlight: 2, reportedBusy: true, reportedLastMs: 900 },
        false,
        undefined
      ]
    ]
    for (const [what, patch, awake, expected] of table) {
      expect(report(entry(patch), awake, 1000), what).toEqual(expected)
    }
  })

  it("tracks calls on a monotonic clock, quiet processes aside, and forgets idle sandboxes", () => {
    let now = 1_000
    const activity = SandboxActivity.make(() => now)
    const end = activity.begin("sbx_1")
    expect(activity.due("sbx_1", () => false)).toEqual({ busy: true, idleMs: 0 })
    now = 4_000
    end()
    end() // once only
    now = 5_000
    expect(activity.due("sbx_1", () => false)).toEqual({ busy: false, idleMs: 1_000 })
    expect(activity.due("sbx_1", () => false)).toBe(undefined)
    // A context's interpreter (quiet) does not keep it awake; another process does.
    activity.quiet("sbx_1", 42)
    const awake = (pids: ReadonlyArray<number>) => (quiet: ReadonlySet<number>) => pids.some((p) => !quiet.has(p))
    expect(activity.due("sbx_1", awake([42]))).toBe(undefined)
    expect(activity.due("sbx_1", awake([42, 43]))).toEqual({ busy: true, idleMs: 0 })
    expect(activity.ids()).toEqual(["sbx_1"])
    // A call in progress keeps it; idle, it is forgotten.
    const end2 = activity.begin("sbx_1")
    activity.forget("sbx_1")
    expect(activity.ids()).toEqual(["sbx_1"])
    end2()
    activity.forget("sbx_1")
    expect(activity.ids()).toEqual([])
    expect(activity.due("sbx_1", () => true)).toBe(undefined)
  })

  it("a sandbox found running at the agent's start is reported at its next check, busy or not", () => {
    let now = 1_000
    const activity = SandboxActivity.make(() => now)
    activity.found("sbx_2")
    now = 1_500
    // The previous agent may have reported it busy: it is told it no longer is.
    expect(activity.due("sbx_2", () => false)).toEqual({ busy: false, idleMs: 500 })
    expect(activity.due("sbx_2", () => false)).toBe(undefined)
  })
})
