import { describe, expect, layer } from "@effect/vitest"
import * as Actor from "@svc/actors/Actor"
import * as Actors from "@svc/actors/Actors"
import { ActorRuntime, type ActorRuntimeOptions, type MessageInfo, type MessageOutcome } from "@svc/actors/Runtime"
import { jsonStore } from "@svc/actors/Store"
import { Nats } from "@svc/bus/Nats"
import * as Database from "@svc/db/Database"
import { OutboxRelay } from "@svc/events/Relay"
import * as Streams from "@svc/events/Streams"
import { eventually } from "@svc/testing/Eventually"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Deferred, Duration, Effect, Exit, Layer, Option, Redacted, Ref, Scope } from "effect"
import { SqlClient } from "effect/sql"
import { Counter, type CounterState, make as makeCounter } from "./Counter.ts"

/** Re-runs `observe` until `check` holds; dies with the last value after `timeout`. */
const stateOf = (id: string) => Effect.map(Actors.get(Counter, id), Option.getOrUndefined)
const seenOf = (id: string) => Effect.map(stateOf(id), (s) => s?.state.seen ?? [])

interface Instance {
  readonly scope: Scope.Closeable
  readonly runtime: ActorRuntime["Service"]
  readonly nats: Nats["Service"]
}

/**
 * A runtime in a scope of its own, with its own NATS connection and Postgres pool (as a separate
 * process would have), so that a test can kill one while another keeps going.
 */
const startRuntime = (actors: ReadonlyArray<Actor.AnyActor>, options: ActorRuntimeOptions = {}) =>
  Effect.gen(function*() {
    const server = yield* TestNats.TestNatsServer
    const url = yield* TestDatabase.TestDatabaseUrl
    const scope = yield* Scope.make()
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    const deps = Layer.merge(
      Layer.effect(Nats, Nats.make({ url: server.url, prefix: server.prefix, name: "runtime" })),
      Database.clientLayer(Redacted.make(url))
    )
    const context = yield* Layer.buildWithScope(
      ActorRuntime.layer(actors, options).pipe(Layer.provideMerge(deps)),
      scope
    )
    return { scope, runtime: Context.get(context, ActorRuntime), nats: Context.get(context, Nats) } satisfies Instance
  })

/** Kills an instance the hard way: its connection goes first (no ack, no nak), then its fibers. */
const crash = (instance: Instance) =>
  Effect.andThen(Effect.promise(() => instance.nats.connection.close()), Scope.close(instance.scope, Exit.void))

/** `base.load`, after which another writer moves the entity (once): the runtime's version is stale. */
const interferingOnce = (base: Actor.ActorStore<typeof CounterState.Type>, entity: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    let interfered = false
    // Only `entity`'s load interferes: a message of an earlier test redelivered to this runtime
    // (its runtime ended before it acked) loads another entity, which must not use up the one time.
    return (id: string) =>
      Effect.tap(base.load(id), (loaded) =>
        id === entity && Option.isSome(loaded) && !interfered
          ? Effect.andThen(
            Effect.sync(() => {
              interfered = true
            }),
            sql`UPDATE actor_state SET version = version + 1, state = jsonb_set(state, '{seen}', state->'seen' || '"other"')
                WHERE type = 'counter' AND id = ${id}`
          )
          : Effect.void)
  })

const env = OutboxRelay.layerWith({ pollInterval: Duration.millis(200) }).pipe(
  Layer.provideMerge(Layer.mergeAll(TestNats.layer, TestDatabase.layerWithUrl))
)

const add = (id: string, tag: string, options?: { readonly msgID?: string }) =>
  Actors.send(Counter, id, { _tag: "Add", n: 1, tag }, options)

describe("ActorRuntime", () => {
  layer(env, { excludeTestServices: true })((it) => {
    it.effect("refuses invalid entity ids and messages before they reach a mailbox", () =>
      Effect.gen(function*() {
        yield* Actors.ensure(Counter)
        for (const id of ["a.b", "*", ">", "", "a b", "x".repeat(129), "é"]) {
          const e = yield* Effect.flip(add(id, "t"))
          expect(e._tag).toBe("InvalidActorMessage")
        }
        const bad = yield* Effect.flip(Actors.send(Counter, "ok", { _tag: "Add", n: 1.5, tag: "t" }))
        expect(bad._tag).toBe("InvalidActorMessage")
        const nats = yield* Nats
        const info = yield* Effect.promise(() => nats.jsm.streams.info(nats.name("ACTOR_COUNTER")))
        expect(info.state.messages).toBe(0)
        expect(yield* Actors.get(Counter, "a.b")).toEqual(Option.none())
      }))

    it.effect("applies each entity's messages once, in order, across all partitions", () =>
      Effect.scoped(Effect.gen(function*() {
        const { runtime } = yield* startRuntime([Counter])
        const ids = ["e-1", "e-2", "e-3", "e-4", "e-5", "e-6"]
        // Interleaved: entity order must hold whatever the other entities do.
        for (let i = 0; i < 15; i++) for (const id of ids) yield* add(id, `t${i}`)
        const expected = Array.from({ length: 15 }, (_, i) => `t${i}`)
        for (const id of ids) {
          const seen = yield* eventually(seenOf(id), (s) => s.length >= 15)
          expect(seen).toEqual(expected)
          expect((yield* stateOf(id))?.version).toBe(15)
        }
        expect(new Set(ids.map((id) => Actor.partitionOf(Counter, id))).size).toBeGreaterThan(1)
        expect(yield* runtime.stats).toEqual({ applied: 90, duplicate: 0, terminated: 0, retry: 0 })
      })))

    it.effect("a duplicate send with the same msgID is applied once", () =>
      Effect.scoped(Effect.gen(function*() {
        yield* startRuntime([Counter])
        const first = yield* add("d-1", "once", { msgID: "d-1-once" })
        const again = yield* add("d-1", "once", { msgID: "d-1-once" })
        expect(first.duplicate).toBe(false)
        expect(again.duplicate).toBe(true)
        yield* add("d-1", "after")
        expect(yield* eventually(seenOf("d-1"), (s) => s.includes("after"))).toEqual(["once", "after"])
      })))

    it.effect("terminates poison messages and keeps the partition flowing", () =>
      Effect.scoped(Effect.gen(function*() {
        const outcomes = yield* Ref.make<Array<MessageOutcome>>([])
        const { runtime } = yield* startRuntime([Counter], {
          hooks: {
            onOutcome: (_info: MessageInfo | undefined, o: MessageOutcome) => Ref.update(outcomes, (os) => [...os, o])
          }
        })
        const nats = yield* Nats
        const id = "p-1"
        const p = Actor.partitionOf(Counter, id)
        const wrong = (p + 1) % Counter.partitions
        const raw = (subject: string, body: string) =>
          Effect.promise(() => nats.js.publish(nats.subject(subject), new TextEncoder().encode(body)))
        yield* add(id, "before")
        yield* raw(`actor.counter.${p}.${id}`, "not json")
        yield* raw(`actor.counter.${p}.${id}`, JSON.stringify({ _tag: "Add", n: "one", tag: "x" }))
        yield* raw(`actor.counter.${p}.${id}`, JSON.stringify({ _tag: "Nope" }))
        yield* Actors.send(Counter, id, { _tag: "Boom" })
        // Mis-routed: the entity's messages belong to another partition.
        yield* raw(`actor.counter.${wrong}.${id}`, JSON.stringify({ _tag: "Add", n: 1, tag: "misrouted" }))
        yield* raw(`actor.counter.${p}.${id}.extra`, JSON.stringify({ _tag: "Add", n: 1, tag: "bad-id" }))
        // A transition whose effect cannot be written (a command to an invalid id): nothing applies.
        yield* Actors.send(Counter, id, { _tag: "Forward", n: 1, tag: "fw", to: "no.such>id" })
        yield* add(id, "after")
        expect(yield* eventually(seenOf(id), (s) => s.includes("after"))).toEqual(["before", "after"])
        const stats = yield* eventually(runtime.stats, (s) => s.terminated + s.applied >= 9)
        expect(stats).toEqual({ applied: 2, duplicate: 0, terminated: 7, retry: 0 })
        expect((yield* stateOf(id))?.state.count).toBe(2)
        // Terminated messages are gone from the work queue, not waiting for redelivery.
        const info = yield* eventually(
          Effect.promise(() => nats.jsm.streams.info(nats.name("ACTOR_COUNTER"))),
          (i) => i.state.messages === 0
        )
        expect(info.state.messages).toBe(0)
      })))

    it.effect("effects go through the outbox: commands reach other actors, events reach EVENTS", () =>
      Effect.scoped(Effect.gen(function*() {
        const events = yield* Streams.ensure()
        yield* startRuntime([Counter])
        yield* Actors.send(Counter, "f-1", { _tag: "Forward", n: 5, tag: "fw", to: "f-2" })
        yield* Actors.send(Counter, "f-1", { _tag: "Notify", orgId: "org_1", tag: "nt" })
        const target = yield* eventually(stateOf("f-2"), (s) => s !== undefined)
        expect(target?.state).toEqual({ count: 5, seen: ["fw<-f-1"] })
        const nats = yield* Nats
        const info = yield* eventually(
          Effect.promise(() => nats.jsm.streams.info(events)),
          (i) => i.state.messages >= 1
        )
        const msg = yield* Effect.promise(() => nats.jsm.streams.getMessage(events, { seq: info.state.first_seq }))
        if (msg === null) return expect.unreachable("no event in EVENTS")
        expect(msg.subject).toBe(nats.subject("evt", "org_1", "counter.notified"))
        const envelope = JSON.parse(new TextDecoder().decode(msg.data))
        expect(envelope).toMatchObject({
          event: "counter.notified",
          org_id: "org_1",
          data: { counter_id: "f-1", count: 5 }
        })
        expect(envelope.ts).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
      })))

    it.effect("Actors.sendViaOutbox sends only if the transaction commits", () =>
      Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* startRuntime([Counter])
        yield* Effect.flip(sql.withTransaction(Effect.andThen(
          Actors.sendViaOutbox(Counter, "o-1", { _tag: "Add", n: 1, tag: "rolled-back" }),
          Effect.fail("no")
        )))
        yield* sql.withTransaction(Actors.sendViaOutbox(Counter, "o-1", { _tag: "Add", n: 1, tag: "committed" }))
        yield* add("o-1", "direct")
        const seen = yield* eventually(seenOf("o-1"), (s) => s.length >= 2)
        expect([...seen].sort()).toEqual(["committed", "direct"])
        const bad = yield* Effect.flip(Actors.sendViaOutbox(Counter, "o.1", { _tag: "Add", n: 1, tag: "x" }))
        expect(bad._tag).toBe("InvalidActorMessage")
      })))

    it.effect("a stale version (another writer) reloads and applies on top of it", () =>
      Effect.scoped(Effect.gen(function*() {
        const base = jsonStore(Counter)
        // Without `saveStep`: the transaction path.
        const store: Actor.ActorStore<typeof CounterState.Type> = {
          load: yield* interferingOnce(base, "s-1"),
          save: base.save
        }
        yield* startRuntime([makeCounter(Counter.partitions, store)])
        yield* add("s-1", "one")
        yield* eventually(seenOf("s-1"), (s) => s.length >= 1)
        yield* add("s-1", "two")
        const final = yield* eventually(stateOf("s-1"), (s) => (s?.state.seen.length ?? 0) >= 3)
        expect(final?.state.seen).toEqual(["one", "other", "two"])
        expect(final?.version).toBe(3)
      })))

    it.effect("in one statement (a store with saveStep): a stale version writes nothing, reloads, applies once", () =>
      Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const base = jsonStore(Counter)
        const store: Actor.ActorStore<typeof CounterState.Type> = { ...base, load: yield* interferingOnce(base, "s-2") }
        yield* startRuntime([makeCounter(Counter.partitions, store)])
        yield* add("s-2", "one", { msgID: "s-2-one" })
        yield* eventually(seenOf("s-2"), (s) => s.length >= 1)
        yield* add("s-2", "two", { msgID: "s-2-two" })
        const final = yield* eventually(stateOf("s-2"), (s) => (s?.state.seen.length ?? 0) >= 3)
        expect(final?.state.seen).toEqual(["one", "other", "two"])
        expect(final?.version).toBe(3)
        // The inbox is the entity's log: each message once, with the version it stored.
        const inbox = yield* sql<{ msg_id: string; version: string }>`
          SELECT msg_id, version::text AS version FROM actor_inbox WHERE type = 'counter' AND entity_id = 's-2'
          ORDER BY version`
        expect(inbox.map((r) => [r.msg_id, r.version])).toEqual([["s-2-one", "1"], ["s-2-two", "3"]])
      })))
  })

  layer(env, { excludeTestServices: true })((it) => {
    it.effect("two runtimes share the partitions, apply each message once, never two of one partition at once", () =>
      Effect.scoped(Effect.gen(function*() {
        const inFlight = new Map<number, number>()
        let overlaps = 0
        const perRuntime = [0, 0]
        const options = (n: number): ActorRuntimeOptions => ({
          hooks: {
            beforeCommit: (info) =>
              Effect.gen(function*() {
                const now = (inFlight.get(info.partition) ?? 0) + 1
                inFlight.set(info.partition, now)
                if (now > 1) overlaps++
                // Hold the partition a little so that an overlap would be seen.
                yield* Effect.sleep(Duration.millis(1))
                inFlight.set(info.partition, inFlight.get(info.partition)! - 1)
              }),
            onOutcome: (_info, outcome) =>
              Effect.sync(() => {
                if (outcome === "applied") perRuntime[n]!++
              })
          }
        })
        yield* startRuntime([Counter], options(0))
        yield* startRuntime([Counter], options(1))
        const ids = Array.from({ length: 8 }, (_, i) => `two-${i}`)
        for (let i = 0; i < 25; i++) for (const id of ids) yield* add(id, `t${i}`)
        const expected = Array.from({ length: 25 }, (_, i) => `t${i}`)
        for (const id of ids) expect(yield* eventually(seenOf(id), (s) => s.length >= 25)).toEqual(expected)
        expect(overlaps).toBe(0)
        expect(perRuntime[0]! + perRuntime[1]!).toBe(200)
        expect(perRuntime[0]).toBeGreaterThan(0)
        expect(perRuntime[1]).toBeGreaterThan(0)
      })))
  })

  layer(env, { excludeTestServices: true })((it) => {
    it.effect("a runtime that dies holding a message (before commit) loses nothing: the other applies it once", () =>
      Effect.scoped(Effect.gen(function*() {
        const holding = yield* Deferred.make<MessageInfo>()
        const victim = yield* startRuntime([Counter], {
          ackWait: Duration.seconds(1),
          hooks: { beforeCommit: (info) => Effect.andThen(Deferred.succeed(holding, info), Effect.never) }
        })
        yield* add("k-1", "held")
        yield* add("k-1", "next")
        yield* Deferred.await(holding)
        const survivor = yield* startRuntime([Counter], { ackWait: Duration.seconds(1) })
        yield* crash(victim)
        expect(yield* eventually(seenOf("k-1"), (s) => s.length >= 2)).toEqual(["held", "next"])
        expect((yield* survivor.runtime.stats).applied).toBe(2)
      })))
  })

  layer(env, { excludeTestServices: true })((it) => {
    it.effect("a runtime that dies between commit and ack: the redelivery is a no-op", () =>
      Effect.scoped(Effect.gen(function*() {
        const committed = yield* Deferred.make<MessageInfo>()
        const victim = yield* startRuntime([Counter], {
          ackWait: Duration.seconds(1),
          hooks: { afterCommit: (info) => Effect.andThen(Deferred.succeed(committed, info), Effect.never) }
        })
        yield* add("k-2", "held")
        yield* add("k-2", "next")
        yield* Deferred.await(committed)
        const survivor = yield* startRuntime([Counter], { ackWait: Duration.seconds(1) })
        yield* crash(victim)
        expect(yield* eventually(seenOf("k-2"), (s) => s.length >= 2)).toEqual(["held", "next"])
        const stats = yield* eventually(survivor.runtime.stats, (s) => s.applied + s.duplicate >= 2)
        expect(stats).toEqual({ applied: 1, duplicate: 1, terminated: 0, retry: 0 })
        expect((yield* stateOf("k-2"))?.version).toBe(2)
      })))
  })

  layer(env, { excludeTestServices: true })((it) => {
    it.effect("a message held longer than ack_wait stays with its runtime (working heartbeats)", () =>
      Effect.scoped(Effect.gen(function*() {
        const deliveries = yield* Ref.make<Array<number>>([])
        const slow = yield* startRuntime([Counter], {
          ackWait: Duration.seconds(1),
          hooks: {
            beforeCommit: (info) =>
              Effect.andThen(
                Ref.update(deliveries, (ds) => [...ds, info.deliveries]),
                info.id === "slow-1" ? Effect.sleep(Duration.millis(2500)) : Effect.void
              )
          }
        })
        yield* add("slow-1", "slow")
        yield* eventually(Ref.get(deliveries), (ds) => ds.length >= 1)
        // Another runtime is ready to take the message if the server gave it back.
        const other = yield* startRuntime([Counter], { ackWait: Duration.seconds(1) })
        expect(yield* eventually(seenOf("slow-1"), (s) => s.length >= 1)).toEqual(["slow"])
        yield* add("slow-1", "after")
        yield* eventually(seenOf("slow-1"), (s) => s.length >= 2)
        expect(yield* Ref.get(deliveries)).toContain(1)
        expect((yield* slow.runtime.stats).applied + (yield* other.runtime.stats).applied).toBe(2)
        expect((yield* slow.runtime.stats).duplicate + (yield* other.runtime.stats).duplicate).toBe(0)
        expect((yield* Ref.get(deliveries)).filter((d) => d > 1)).toEqual([])
      })))
  })
})
