import { describe, expect, layer } from "@effect/vitest"
import { decodeMessage, publish } from "@svc/bus/Codec"
import { BusHealth, Nats } from "@svc/bus/Nats"
import { ensureBucket, ensureConsumer, ensureStream } from "@svc/bus/Topology"
import * as TestNats from "@svc/testing/TestNats"
import { Effect, Layer, Schema } from "effect"
import { AckPolicy } from "@nats-io/jetstream"

const Ping = Schema.Struct({ n: Schema.Int, at: Schema.String })

describe("Bus", () => {
  layer(BusHealth.layer.pipe(Layer.provideMerge(TestNats.layer)), { excludeTestServices: true })((it) => {
    it.effect("declares streams, consumers and buckets idempotently", () =>
      Effect.gen(function*() {
        const nats = yield* Nats
        const first = yield* ensureStream({ name: "PINGS", subjects: ["ping.>"] })
        const again = yield* ensureStream({ name: "PINGS", subjects: ["ping.>"], maxAgeMs: 60_000 })
        expect(again).toBe(first)
        expect(first).toBe(`${nats.prefix}_PINGS`)
        const info = yield* Effect.promise(() => nats.jsm.streams.info(first))
        expect(info.config.subjects).toEqual([`${nats.prefix}.ping.>`])
        expect(info.config.max_age).toBe(60_000 * 1_000_000)
        yield* ensureConsumer("PINGS", { durable_name: "reader", ack_policy: AckPolicy.Explicit })
        yield* ensureConsumer("PINGS", { durable_name: "reader", ack_policy: AckPolicy.Explicit, max_ack_pending: 1 })
        const consumer = yield* Effect.promise(() => nats.jsm.consumers.info(first, `${nats.prefix}_reader`))
        expect(consumer.config.max_ack_pending).toBe(1)
        const kv = yield* ensureBucket({ name: "things" })
        yield* Effect.promise(() => kv.put("a", "1"))
        const kv2 = yield* ensureBucket({ name: "things" })
        expect((yield* Effect.promise(() => kv2.get("a")))?.string()).toBe("1")
      }))

    it.effect("publishes typed messages once per msgID and decodes them", () =>
      Effect.gen(function*() {
        const nats = yield* Nats
        yield* ensureStream({ name: "PINGS2", subjects: ["ping2.>"] })
        const send = publish(Ping)
        const subject = nats.subject("ping2", "a")
        const ack1 = yield* send(subject, { n: 1, at: "x" }, { msgID: "m1" })
        const ack2 = yield* send(subject, { n: 1, at: "x" }, { msgID: "m1" })
        expect(ack2.duplicate).toBe(true)
        expect(ack2.seq).toBe(ack1.seq)
        const msg = yield* Effect.promise(() => nats.jsm.streams.getMessage(nats.name("PINGS2"), { seq: ack1.seq }))
        if (!msg) return expect.unreachable("the published message is in the stream")
        const decoded = yield* decodeMessage(Ping)({ subject: msg.subject, data: msg.data } as never)
        expect(decoded).toEqual({ n: 1, at: "x" })
        const bad = yield* Effect.flip(decodeMessage(Ping)({ subject, data: new TextEncoder().encode("{\"n\":\"no\"}") } as never))
        expect(bad._tag).toBe("DecodeError")
      }))

    it.effect("reports the bus up", () =>
      Effect.gen(function*() {
        expect(yield* (yield* BusHealth).check).toBe("up")
      }))
  })
})
