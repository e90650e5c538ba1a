/**
 * A transfer's idle bound (TransferIdle.ts): a connection that moves no byte for the bound is
 * closed; one whose bytes a splice moves outside Node (`movingOutside`: its counters stand
 * still) is not, until the splice is done.
 */
import { describe, expect, it } from "@effect/vitest"
import * as TransferIdle from "@svc/host-protocol/TransferIdle"
import { Effect } from "effect"
import { TestClock } from "effect/testing"

/** A connection's counters, moved by hand; `destroyed` once closed. */
const connection = () => ({
  bytesRead: 0,
  bytesWritten: 0,
  destroyed: false,
  destroy() {
    this.destroyed = true
  }
})

describe("TransferIdle", () => {
  it.effect("closes a connection that moved nothing for the bound, not one that keeps moving", () =>
    Effect.gen(function*() {
      const quiet = connection()
      const busy = connection()
      yield* TransferIdle.closeWhenIdle(quiet as never, 1000, Effect.void)
      yield* TransferIdle.closeWhenIdle(busy as never, 1000, Effect.void)
      for (let i = 0; i < 8; i++) {
        busy.bytesWritten += 1
        yield* TestClock.adjust(250)
      }
      expect(quiet.destroyed).toBe(true)
      expect(busy.destroyed).toBe(false)
    }).pipe(Effect.scoped))

  it.effect("a connection moved outside Node is never idle until that ends, then the bound counts again", () =>
    Effect.gen(function*() {
      const spliced = connection()
      yield* TransferIdle.closeWhenIdle(spliced as never, 1000, Effect.void)
      const done = TransferIdle.movingOutside(spliced)
      // Two splices at once: the connection stays busy until both are done.
      const other = TransferIdle.movingOutside(spliced)
      yield* TestClock.adjust(5000)
      expect(spliced.destroyed).toBe(false)
      done()
      done()
      yield* TestClock.adjust(5000)
      expect(spliced.destroyed).toBe(false)
      other()
      yield* TestClock.adjust(1500)
      expect(spliced.destroyed).toBe(true)
    }).pipe(Effect.scoped))
})
