import { describe, expect, it } from "@effect/vitest"
import * as Actor from "@svc/actors/Actor"
import * as Actors from "@svc/actors/Actors"
import { Effect, Schema } from "effect"
import { Counter } from "./Counter.ts"

const ctx = { id: "c-1", now: Date.UTC(2026, 0, 1), msgId: "m" }

describe("Actor (pure)", () => {
  it("FNV-1a matches the reference vectors", () => {
    expect(Actor.fnv1a("")).toBe(0x811c9dc5)
    expect(Actor.fnv1a("a")).toBe(0xe40c292c)
    expect(Actor.fnv1a("foobar")).toBe(0xbf9cf968)
  })

  it("routes every id to a stable partition in range, spreading ids over all partitions", () => {
    const seen = new Set<number>()
    for (let i = 0; i < 200; i++) {
      const p = Actor.partitionOf({ partitions: 8 }, `sbx_${i}`)
      expect(p).toBeGreaterThanOrEqual(0)
      expect(p).toBeLessThan(8)
      expect(Actor.partitionOf({ partitions: 8 }, `sbx_${i}`)).toBe(p)
      seen.add(p)
    }
    expect(seen.size).toBe(8)
    expect(Actor.mailboxTokens(Counter, "c-1")).toEqual([
      "actor",
      "counter",
      String(Actor.partitionOf(Counter, "c-1")),
      "c-1"
    ])
    expect(Actor.streamName(Counter)).toBe("ACTOR_COUNTER")
    expect(Actor.consumerName(Counter, 3)).toBe("ACTOR_COUNTER_3")
  })

  it("refuses invalid definitions", () => {
    const base = { state: Schema.Unknown, message: Schema.Unknown, transition: () => Actor.none() }
    expect(() => Actor.make({ ...base, type: "Counter", partitions: 1 })).toThrow()
    expect(() => Actor.make({ ...base, type: "a.b", partitions: 1 })).toThrow()
    expect(() => Actor.make({ ...base, type: "ok", partitions: 0 })).toThrow()
    expect(() => Actor.make({ ...base, type: "ok", partitions: 1.5 })).toThrow()
    expect(() => Actor.make({ ...base, type: "ok", partitions: 5000 })).toThrow()
    expect(Actor.make({ ...base, type: "ok_1", partitions: 16 }).partitions).toBe(16)
  })

  it("the counter's transitions: create, add, forward and notify effects, throw on Boom", () => {
    const t1 = Counter.transition(undefined, { _tag: "Add", n: 2, tag: "a" }, ctx)
    expect(t1).toEqual({ state: { count: 2, seen: ["a"] }, effects: [] })
    const t2 = Counter.transition(t1.state, { _tag: "Forward", n: 3, tag: "f", to: "c-2" }, ctx)
    expect(t2.state).toEqual({ count: 5, seen: ["a", "f"] })
    expect(t2.effects).toEqual([{
      _tag: "Send",
      actor: Counter,
      id: "c-2",
      message: { _tag: "Add", n: 3, tag: "f<-c-1" }
    }])
    const t3 = Counter.transition(t2.state, { _tag: "Notify", orgId: "org_1", tag: "n" }, ctx)
    expect(t3.effects).toEqual([{
      _tag: "Event",
      event: { event: "counter.notified", orgId: "org_1", data: { counter_id: "c-1", count: 5 } }
    }])
    expect(() => Counter.transition(t3.state, { _tag: "Boom" }, ctx)).toThrow("boom")
  })

  it.effect("effects become the outbox rows the runtime writes; unwritable effects are refused", () =>
    Effect.gen(function*() {
      const now = Date.UTC(2026, 10, 22, 1, 2, 3, 4)
      const messages = yield* Actors.toOutbox([
        Actor.send(Counter, "c-2", { _tag: "Add", n: 3, tag: "x" }),
        Actor.emit({ event: "counter.notified", orgId: "org_1", data: { count: 1 } }),
        Actor.publish(["agent", "host_1", "create"], { a: 1 })
      ], now)
      expect(messages).toEqual([
        { subject: `actor.counter.${Actor.partitionOf(Counter, "c-2")}.c-2`, payload: { _tag: "Add", n: 3, tag: "x" } },
        {
          subject: ["evt", "org_1", "counter.notified"],
          payload: { event: "counter.notified", org_id: "org_1", ts: "2026-11-22T01:02:03.004Z", data: { count: 1 } }
        },
        { subject: "agent.host_1.create", payload: { a: 1 } }
      ])
      for (
        const bad of [
          Actor.send(Counter, "a.b", { _tag: "Add", n: 1, tag: "x" }),
          Actor.send(Counter, "ok", { _tag: "Add", n: 0.5, tag: "x" }),
          Actor.emit({ event: "sandbox.*", orgId: "org_1", data: {} }),
          Actor.publish(["agent", "*"], {})
        ]
      ) {
        const e = yield* Effect.flip(Actors.toOutbox([bad], now))
        expect(["InvalidActorMessage", "InvalidOutboxMessage"]).toContain(e._tag)
      }
    }))
})
