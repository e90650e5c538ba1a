/**
 * The `EVENTS` stream is ensured once per connection (`Streams.ensure`): a second ensure asks the
 * server nothing, so a stream removed behind its back stays removed until a caller whose use of
 * it failed forgets it, as `Realtime.follow` does: the client's next follow makes it again.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import * as Realtime from "@svc/events/Realtime"
import * as Streams from "@svc/events/Streams"
import * as TestNats from "@svc/testing/TestNats"
import { Effect, Exit } from "effect"

const ORG = "org_0000000000cccccccccccccccc"

const exists = (stream: string) =>
  Effect.gen(function*() {
    const nats = yield* Nats
    return yield* Effect.promise(() => nats.jsm.streams.info(stream).then(() => true, () => false))
  })

describe("Streams.ensure", () => {
  layer(TestNats.layer, { excludeTestServices: true })((it) => {
    it.effect("once per connection; a follow that fails forgets it, and the next one makes the stream again", () =>
      Effect.gen(function*() {
        const nats = yield* Nats
        const stream = yield* Streams.ensure()
        expect(yield* exists(stream)).toBe(true)

        yield* Effect.promise(() => nats.jsm.streams.delete(stream))
        // Known on this connection: not asked again, not made again.
        expect(yield* Streams.ensure()).toBe(stream)
        expect(yield* exists(stream)).toBe(false)

        const lost = yield* Effect.exit(Effect.scoped(Realtime.follow(ORG, undefined)))
        expect(Exit.isFailure(lost)).toBe(true)
        // The client reconnects: the stream is made again and the follow opens.
        const followed = yield* Effect.exit(Effect.scoped(Realtime.follow(ORG, undefined)))
        expect(Exit.isSuccess(followed)).toBe(true)
        expect(yield* exists(stream)).toBe(true)
      }))
  })
})
