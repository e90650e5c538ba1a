import { describe, expect, layer } from "@effect/vitest"
import { AckPolicy } from "@nats-io/jetstream"
import { consumeScoped } from "@svc/bus/Consume"
import { Nats } from "@svc/bus/Nats"
import { ensureConsumer, ensureStream } from "@svc/bus/Topology"
import * as TestNats from "@svc/testing/TestNats"
import { Duration, Effect, Option } from "effect"

/** A stream taking `<subject>.>` and a durable consumer of it named `subject`. */
const durableOn = (name: string, subject: string) =>
  Effect.gen(function*() {
    const nats = yield* Nats
    const stream = yield* ensureStream({ name, subjects: [`${subject}.>`] })
    yield* ensureConsumer(name, { durable_name: subject, ack_policy: AckPolicy.Explicit })
    return yield* Effect.promise(() => nats.js.consumers.get(stream, nats.name(subject)))
  })

describe("consumeScoped", () => {
  layer(TestNats.layer, { excludeTestServices: true })((it) => {
    // A role stopped right after it started: nothing has read the messages yet. nats.js's own
    // close() never resolves then (its stop waits for a reader); the release must not wait for it.
    it.effect("a scope closed before anything read its messages closes at once", () =>
      Effect.gen(function*() {
        const nats = yield* Nats
        const consumer = yield* durableOn("UNREAD", "unread")
        const closed = yield* Effect.scoped(consumeScoped(consumer, "consume unread")).pipe(
          Effect.timeoutOption(Duration.seconds(5))
        )
        expect(Option.isSome(closed)).toBe(true)
        // And a message published afterwards is still there for the next reader.
        yield* Effect.promise(() => nats.js.publish(nats.subject("unread", "a"), "after"))
        const next = yield* Effect.promise(() => consumer.next({ expires: 2_000 }))
        expect(next?.string()).toBe("after")
      }))

    it.effect("a reader gets the messages, and its scope's end stops it", () =>
      Effect.gen(function*() {
        const nats = yield* Nats
        const consumer = yield* durableOn("READ", "read")
        yield* Effect.promise(() => nats.js.publish(nats.subject("read", "a"), "one"))
        const got = yield* Effect.scoped(Effect.gen(function*() {
          const messages = yield* consumeScoped(consumer, "consume read")
          const iterator = messages[Symbol.asyncIterator]()
          const first = yield* Effect.promise(() => iterator.next())
          first.value.ack()
          return first.value.string()
        })).pipe(Effect.timeoutOption(Duration.seconds(5)))
        expect(got).toEqual(Option.some("one"))
      }))
  })
})
