import { describe, expect, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { ensureBucket } from "@svc/bus/Topology"
import * as Outbox from "@svc/events/Outbox"
import { OutboxRelay } from "@svc/events/Relay"
import * as Streams from "@svc/events/Streams"
import { startNats } from "@svc/local-servers/Servers"
import { eventually } from "@svc/testing/Eventually"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Deferred, Duration, Effect, Exit, Layer, Ref, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { readStream } from "./support.ts"

const ORG = "org_0000000000bbbbbbbbbbbbbbbb"

const pending = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  return (yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox WHERE sent_at IS NULL`)[0]!.n
})

const outboxIds = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  return (yield* sql<{ id: string }>`SELECT id FROM outbox ORDER BY seq`).map((r) => r.id)
})

/** Starts a relay in a scope of its own, so that a test can kill it by closing that scope. */
const startRelay = (options: Parameters<typeof OutboxRelay.layerWith>[0]) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    yield* Layer.buildWithScope(OutboxRelay.layerWith(options), scope)
    return scope
  })

const appendEvents = (n: number, from = 0) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    for (let i = from; i < from + n; i++) {
      yield* sql.withTransaction(Outbox.appendEvent({ event: "ping", orgId: ORG, data: { i } }))
    }
  })

const envelopesOf = (messages: ReadonlyArray<{ text: string }>) =>
  messages.map((m) => JSON.parse(m.text) as Outbox.Envelope)

const env = Layer.mergeAll(TestNats.layer, TestDatabase.layer)

describe("OutboxRelay", () => {
  layer(env, { excludeTestServices: true })((it) => {
    it.effect("publishes committed rows once each, in order, with msgID = row id; rolled-back rows never", () =>
      Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const stream = yield* Streams.ensure()
        yield* startRelay({ pollInterval: Duration.millis(200) })
        yield* Effect.flip(sql.withTransaction(Effect.andThen(
          Outbox.appendEvent({ event: "ping", orgId: ORG, data: { rolled_back: true } }),
          Effect.fail("rollback")
        )))
        yield* appendEvents(30)
        // Several rows in one transaction, then a batch that is larger than nothing.
        yield* sql.withTransaction(
          Outbox.appendEvents([30, 31, 32].map((i) => ({ event: "ping", orgId: ORG, data: { i } })))
        )
        const messages = yield* eventually(readStream(stream), (ms) => ms.length >= 33)
        yield* eventually(pending, (n) => n === 0)
        expect(messages.map((m) => m.msgId)).toEqual(yield* outboxIds)
        const nats = yield* Nats
        expect(new Set(messages.map((m) => m.subject))).toEqual(new Set([nats.subject("evt", ORG, "ping")]))
        expect(envelopesOf(messages).map((e) => e.data.i)).toEqual(Array.from({ length: 33 }, (_, i) => i))
        expect(envelopesOf(messages).every((e) => e.data.rolled_back === undefined)).toBe(true)
      })))
  })

  layer(env, { excludeTestServices: true })((it) => {
    it.effect("a relay killed between publish and mark-sent is replaced without a duplicate in the stream", () =>
      Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const stream = yield* Streams.ensure()
        const published = yield* Deferred.make<ReadonlyArray<string>>()
        const first = yield* startRelay({
          // The worst moment: the batch is in the stream, the rows are not marked sent.
          afterPublish: (rows) => Effect.andThen(Deferred.succeed(published, rows.map((r) => r.id)), Effect.never)
        })
        yield* sql.withTransaction(
          Outbox.appendEvents(Array.from({ length: 5 }, (_, i) => ({ event: "ping", orgId: ORG, data: { i } })))
        )
        const ids = yield* Deferred.await(published)
        expect(ids).toEqual(yield* outboxIds)
        expect((yield* readStream(stream)).map((m) => m.msgId)).toEqual(ids)
        expect(yield* pending).toBe(5)
        yield* Scope.close(first, Exit.void)
        // The dead relay's transaction rolled back: the rows are still unsent.
        expect(yield* pending).toBe(5)

        yield* startRelay({ pollInterval: Duration.millis(100) })
        yield* appendEvents(2, 5)
        yield* eventually(pending, (n) => n === 0)
        const messages = yield* eventually(readStream(stream), (ms) => ms.length >= 7)
        expect(messages.map((m) => m.msgId)).toEqual(yield* outboxIds)
        expect(envelopesOf(messages).map((e) => e.data.i)).toEqual([0, 1, 2, 3, 4, 5, 6])
      })))
  })

  layer(env, { excludeTestServices: true })((it) => {
    it.effect("several relays never publish the same row twice", () =>
      Effect.scoped(Effect.gen(function*() {
        const stream = yield* Streams.ensure()
        const seen = yield* Ref.make<Array<string>>([])
        const record = (rows: ReadonlyArray<Outbox.OutboxRow>) =>
          Ref.update(seen, (s) => [...s, ...rows.map((r) => r.id)])
        for (let i = 0; i < 3; i++) {
          yield* startRelay({ batchSize: 7, afterPublish: record, pollInterval: Duration.millis(50) })
        }
        yield* Effect.forEach([0, 1, 2, 3], (w) => appendEvents(15, w * 100), { concurrency: "unbounded" })
        yield* eventually(pending, (n) => n === 0)
        const messages = yield* eventually(readStream(stream), (ms) => ms.length >= 60)
        const ids = yield* outboxIds
        // Concurrent writers commit in any order, so the stream follows commit order, not seq
        // order; what must hold: every row once, and each writer's own rows in its order.
        expect(messages.map((m) => m.msgId).sort()).toEqual([...ids].sort())
        const published = envelopesOf(messages).map((e) => e.data.i as number)
        for (const w of [0, 1, 2, 3]) {
          const mine = published.filter((i) => i >= w * 100 && i < w * 100 + 100)
          expect(mine).toEqual(Array.from({ length: 15 }, (_, k) => w * 100 + k))
        }
        // Each row was published by exactly one relay, once: nothing relied on the stream's dedup.
        const byRelays = yield* Ref.get(seen)
        expect(byRelays.length).toBe(60)
        expect([...byRelays].sort()).toEqual([...ids].sort())
      })))
  })

  layer(env, { excludeTestServices: true })((it) => {
    it.effect("the leader's connection killed: another relay leads and nothing is lost, duplicated or reordered", () =>
      Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const stream = yield* Streams.ensure()
        for (let i = 0; i < 2; i++) {
          yield* startRelay({ pollInterval: Duration.millis(50), maxBackoff: Duration.millis(100) })
        }
        yield* appendEvents(5)
        yield* eventually(pending, (n) => n === 0)
        // The leader holds the relays' session lock: kill its backend, as a lost connection would.
        const leaderBackends = () =>
          sql<
            { pid: number }
          >`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
        const [leader] = yield* leaderBackends()
        expect(leader).toBeDefined()
        yield* sql`SELECT pg_terminate_backend(${leader!.pid})`
        yield* appendEvents(5, 5)
        yield* eventually(pending, (n) => n === 0)
        // A new leader, on another backend.
        const [next] = yield* eventually(leaderBackends(), (rows) => rows.length === 1)
        expect(next!.pid).not.toBe(leader!.pid)
        yield* appendEvents(5, 10)
        yield* eventually(pending, (n) => n === 0)
        const messages = yield* eventually(readStream(stream), (ms) => ms.length >= 15)
        expect(messages.map((m) => m.msgId)).toEqual(yield* outboxIds)
        expect(envelopesOf(messages).map((e) => e.data.i)).toEqual(Array.from({ length: 15 }, (_, i) => i))
      })))
  })

  layer(TestDatabase.layer, { excludeTestServices: true })((it) => {
    it.effect("keeps going while NATS is down and delivers everything once it is back", () =>
      Effect.scoped(Effect.gen(function*() {
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-relay-nats-"))
        yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
        let server = yield* Effect.promise(() => startNats({ dir }))
        const port = server.port
        yield* Effect.addFinalizer(() => Effect.promise(() => server.stop()))
        const nats = yield* Layer.build(Layer.effect(Nats, Nats.make({ url: server.url, prefix: "relaytest" })))
        yield* Effect.gen(function*() {
          const stream = yield* Streams.ensure()
          yield* startRelay({
            publishTimeoutMs: 300,
            maxBackoff: Duration.millis(200),
            pollInterval: Duration.millis(100)
          })
          yield* appendEvents(3)
          yield* eventually(pending, (n) => n === 0)

          yield* Effect.promise(() => server.stop())
          yield* appendEvents(3, 3)
          // Give the relay time to fail against the dead server a few times.
          yield* Effect.sleep(Duration.seconds(1))
          expect(yield* pending).toBe(3)

          server = yield* Effect.promise(() => startNats({ dir, port }))
          yield* appendEvents(2, 6)
          yield* eventually(pending, (n) => n === 0)
          const messages = yield* eventually(readStream(stream), (ms) => ms.length >= 8)
          expect(messages.map((m) => m.msgId)).toEqual(yield* outboxIds)
          expect(envelopesOf(messages).map((e) => e.data.i)).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
        }).pipe(Effect.provide(nats))
      })))
  })

  layer(env, { excludeTestServices: true })((it) => {
    it.effect("KV rows: a put lands in the prefixed bucket under its key, a delete removes it, in order with messages", () =>
      Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const nats = yield* Nats
        const stream = yield* Streams.ensure()
        const kv = yield* ensureBucket({ name: "relaykv", history: 1 })
        yield* startRelay({ pollInterval: Duration.millis(200) })
        const get = (key: string) =>
          Effect.promise(async () => {
            const entry = await kv.get(key)
            return entry === null || entry.operation !== "PUT" ? null : entry.json<unknown>()
          })
        yield* sql.withTransaction(Outbox.appendAll([
          Outbox.kvPut("relaykv", "sandbox.a", { n: 1 }),
          Outbox.kvPut("relaykv", "sandbox.b", { n: 2 })
        ]))
        // A message and KV rows in one transaction: both kinds go out.
        yield* sql.withTransaction(Effect.andThen(
          Outbox.appendEvent({ event: "ping", orgId: ORG, data: { i: 0 } }),
          Outbox.appendAll([Outbox.kvPut("relaykv", "sandbox.a", { n: 3 }), Outbox.kvDelete("relaykv", "sandbox.b")])
        ))
        yield* eventually(pending, (n) => n === 0)
        expect(yield* get("sandbox.a")).toEqual({ n: 3 })
        expect(yield* get("sandbox.b")).toBeNull()
        const deleted = yield* Effect.promise(() => kv.get("sandbox.b"))
        expect(deleted?.operation).toBe("DEL")
        // The KV's stream holds them under the prefixed bucket's subjects; the event went to EVENTS.
        const subjects = (yield* readStream(`KV_${nats.name("relaykv")}`)).map((m) => m.subject)
        expect(subjects).toEqual([`$KV.${nats.name("relaykv")}.sandbox.a`, `$KV.${nats.name("relaykv")}.sandbox.b`])
        expect((yield* readStream(stream)).length).toBe(1)
        // A KV row must name a bucket and a key.
        const refused = yield* Effect.flip(Outbox.appendAll([{ subject: "nokey", payload: 1, kv: "put" }]))
        expect(refused._tag).toBe("InvalidOutboxMessage")
      })))
  })
})
