import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

describe("toolchain", () => {
  it.effect("runs Effect tests on Node 24", () =>
    Effect.gen(function*() {
      expect(Number(process.versions.node.split(".")[0])).toBeGreaterThanOrEqual(24)
      expect(yield* Effect.succeed(1)).toBe(1)
    }))
})
