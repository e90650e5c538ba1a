/**
 * The collections' check (TransferMemory.ts) runs only while a transfer is in flight: none held,
 * no timer; the first hold starts it, nested holds keep it, the last release stops it; a scoped
 * hold ends with its scope, whether the transfer succeeded or failed.
 */
import { describe, expect, it } from "@effect/vitest"
import * as TransferMemory from "@svc/host-protocol/TransferMemory"
import { Effect, Exit } from "effect"

describe("TransferMemory", () => {
  it.effect("checks only while a transfer is held, nested holds included", () =>
    Effect.gen(function*() {
      yield* TransferMemory.accountExternalMemoryInHeapLimit
      expect(TransferMemory.inFlightCount()).toBe(0)
      expect(TransferMemory.active()).toBe(false)

      const first = TransferMemory.hold()
      expect(TransferMemory.active()).toBe(true)
      const second = TransferMemory.hold()
      expect(TransferMemory.inFlightCount()).toBe(2)

      first()
      // A release called twice (a stream's end, then its scope) counts once.
      first()
      expect(TransferMemory.inFlightCount()).toBe(1)
      expect(TransferMemory.active()).toBe(true)

      second()
      expect(TransferMemory.inFlightCount()).toBe(0)
      expect(TransferMemory.active()).toBe(false)

      // A later transfer starts it again.
      const third = TransferMemory.hold()
      expect(TransferMemory.active()).toBe(true)
      third()
      expect(TransferMemory.active()).toBe(false)
    }))

  it.effect("a scoped hold ends with its scope, on success or failure", () =>
    Effect.gen(function*() {
      yield* TransferMemory.accountExternalMemoryInHeapLimit
      yield* Effect.scoped(Effect.gen(function*() {
        yield* TransferMemory.inFlight
        yield* Effect.scoped(TransferMemory.inFlight)
        expect(TransferMemory.inFlightCount()).toBe(1)
        expect(TransferMemory.active()).toBe(true)
      }))
      expect(TransferMemory.active()).toBe(false)

      const failed = yield* Effect.exit(Effect.scoped(Effect.gen(function*() {
        yield* TransferMemory.inFlight
        expect(TransferMemory.active()).toBe(true)
        return yield* Effect.fail("the client went away")
      })))
      expect(Exit.isFailure(failed)).toBe(true)
      expect(TransferMemory.inFlightCount()).toBe(0)
      expect(TransferMemory.active()).toBe(false)
    }))
})
