import { describe, expect, layer } from "@effect/vitest"
import { AckPolicy, DiscardPolicy } from "@nats-io/jetstream"
import { decodeMessage, publish } from "@svc/bus/Codec"
import { BusHealth, Nats } from "@svc/bus/Nats"
import { ensureBucket, ensureConsumer, ensureStream } from "@svc/bus/Topology"
import * as TestNats from "@svc/testing/TestNats"
import { Effect, Layer, Schema } from "effect"

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
        const bad = yield* Effect.flip(
          decodeMessage(Ping)({ subject, data: new TextEncoder().encode("{\"n\":\"no\"}") } as never)
        )
        expect(bad._tag).toBe("DecodeError")
      }))

    it.effect("publishAcked: the stream's acknowledgement, duplicates by msgId, refusals as BusError", () =>
      Effect.gen(function*() {
        const nats = yield* Nats
        const stream = nats.name("ACKED")
        // At most 3 messages, then refuse new ones: a stream that answers with an error.
        yield* Effect.promise(() =>
          nats.jsm.streams.add({
            name: stream,
            subjects: [nats.subject("acked", ">")],
            max_msgs: 3,
            discard: DiscardPolicy.New
          })
        )
        const data = new TextEncoder().encode("hello")
        // Many at once: each gets its own acknowledgement, in the order the stream stored them.
        const acks = yield* Effect.forEach(
          [1, 2],
          (i) => nats.publishAcked(nats.subject("acked", "a"), data, { msgId: `m${i}` }),
          { concurrency: "unbounded" }
        )
        expect(acks.map((a) => a.stream)).toEqual([stream, stream])
        expect(new Set(acks.map((a) => a.seq))).toEqual(new Set([1, 2]))
        expect(acks.every((a) => !a.duplicate)).toBe(true)
        const again = yield* nats.publishAcked(nats.subject("acked", "a"), data, { msgId: "m1" })
        expect(again).toMatchObject({ duplicate: true })
        const stored = yield* Effect.promise(() => nats.jsm.streams.getMessage(stream, { seq: 1 }))
        expect(new TextDecoder().decode(stored!.data)).toBe("hello")
        expect(stored!.header.get("Nats-Msg-Id")).toMatch(/^m[12]$/)
        // No stream for the subject: the server answers "no responders" at once.
        const none = yield* Effect.flip(nats.publishAcked(nats.subject("nostream", "x"), data, { timeoutMs: 2_000 }))
        expect(none).toMatchObject({ _tag: "BusError", message: "no stream listens on this subject" })
        // The stream refuses (full, discard new): its error description.
        yield* nats.publishAcked(nats.subject("acked", "b"), data)
        const full = yield* Effect.flip(nats.publishAcked(nats.subject("acked", "c"), data))
        expect(full._tag).toBe("BusError")
        expect(full.message).toMatch(/maximum messages exceeded/i)
      }))

    it.effect("reports the bus up", () =>
      Effect.gen(function*() {
        expect(yield* (yield* BusHealth).check).toBe("up")
      }))
  })
})
