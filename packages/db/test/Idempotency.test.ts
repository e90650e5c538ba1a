/**
 * The shared Idempotency-Key store on a real Postgres: one resource per key however many
 * requests race, replay of the first answer, 422 for another body, scoping by org and by
 * operation, expiry after 24 h, and entries sealed at rest.
 */
import { assert, describe, expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import { Idempotency, type Outcome, requestHash } from "@svc/db/Idempotency"
import { IdempotencyKeyReused } from "@svc/domain/Errors"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { Effect, Exit, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"

class WidgetRefused extends Schema.TaggedError<WidgetRefused>()("WidgetRefused", {}) {}

interface Widget {
  readonly id: number
  readonly name: string
  readonly secret: string
}

/** A feature's table: what the creates below make. */
const Widgets = Layer.effectDiscard(
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`CREATE TABLE widgets (id serial PRIMARY KEY, org_id text NOT NULL, name text NOT NULL)`
  }).pipe(Effect.orDie)
)

const testLayer = Layer.mergeAll(Idempotency.layer, Widgets).pipe(
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layer, SecretBox.layer))
)

const widgetsOf = (orgId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql<{ id: number; name: string }>`SELECT id, name FROM widgets WHERE org_id = ${orgId} ORDER BY id`
  }).pipe(Effect.orDie)

/**
 * A create through the store: inserts a widget (after `delayMs` inside the transaction, so that
 * racing requests meet while the first holds the key) and answers it with a secret shown once.
 */
const createWidget = (options: {
  readonly orgId: string
  readonly key: string | undefined
  readonly body: Record<string, unknown>
  readonly operation?: string
  readonly delayMs?: number
  readonly refuse?: boolean
}) =>
  Effect.gen(function*() {
    const idempotency = yield* Idempotency
    const sql = yield* SqlClient.SqlClient
    return yield* idempotency.run({
      orgId: options.orgId,
      operation: options.operation ?? "widgets.create",
      key: options.key,
      request: options.body,
      response: (widget: Widget) => widget,
      create: Effect.gen(function*() {
        if (options.delayMs !== undefined) yield* sql`SELECT pg_sleep(${options.delayMs / 1000})`
        const [row] = yield* sql<{ id: number }>`
          INSERT INTO widgets (org_id, name) VALUES (${options.orgId}, ${String(options.body.name)}) RETURNING id`
        if (options.refuse === true) return yield* new WidgetRefused()
        return { id: row!.id, name: String(options.body.name), secret: `shown-once-${row!.id}-${"s".repeat(16)}` }
      })
    })
  })

const createdOf = (outcome: Outcome<Widget>) => {
  assert(outcome._tag === "Created", `expected Created, got ${outcome._tag}`)
  return outcome.value
}

const replayedOf = (outcome: Outcome<Widget>) => {
  assert(outcome._tag === "Replayed", `expected Replayed, got ${outcome._tag}`)
  return outcome.body
}

let orgs = 0
const newOrg = () => `org_idem_${++orgs}_${Date.now()}`

describe("Idempotency", () => {
  layer(testLayer, { excludeTestServices: true })((it) => {
    it.effect("without a key every request creates", () =>
      Effect.gen(function*() {
        const orgId = newOrg()
        createdOf(yield* createWidget({ orgId, key: undefined, body: { name: "a" } }))
        createdOf(yield* createWidget({ orgId, key: undefined, body: { name: "a" } }))
        expect(yield* widgetsOf(orgId)).toHaveLength(2)
      }))

    it.effect("the same key and body replay the first answer (key order does not matter); another body is 422", () =>
      Effect.gen(function*() {
        const orgId = newOrg()
        const body = { name: "w", size: { h: 1, w: 2 }, tags: ["x", "y"] }
        const first = createdOf(yield* createWidget({ orgId, key: "key-replay-1", body }))
        const again = yield* createWidget({
          orgId,
          key: "key-replay-1",
          body: { tags: ["x", "y"], size: { w: 2, h: 1 }, name: "w" }
        })
        expect(replayedOf(again)).toEqual(first)
        const other = yield* Effect.flip(createWidget({ orgId, key: "key-replay-1", body: { ...body, name: "v" } }))
        expect(other).toBeInstanceOf(IdempotencyKeyReused)
        // Array order is part of the body.
        const reordered = yield* Effect.flip(
          createWidget({ orgId, key: "key-replay-1", body: { ...body, tags: ["y", "x"] } })
        )
        expect(reordered).toBeInstanceOf(IdempotencyKeyReused)
        expect(yield* widgetsOf(orgId)).toEqual([{ id: first.id, name: "w" }])
      }))

    it.effect("N concurrent requests with one key make exactly one resource; the others replay it", () =>
      Effect.gen(function*() {
        const orgId = newOrg()
        const outcomes = yield* Effect.all(
          Array.from(
            { length: 8 },
            () => createWidget({ orgId, key: "key-race-0001", body: { name: "raced" }, delayMs: 200 })
          ),
          { concurrency: "unbounded" }
        )
        const created = outcomes.filter((o) => o._tag === "Created")
        expect(created).toHaveLength(1)
        const first = createdOf(created[0]!)
        for (const o of outcomes.filter((o) => o._tag === "Replayed")) expect(replayedOf(o)).toEqual(first)
        expect(yield* widgetsOf(orgId)).toEqual([{ id: first.id, name: "raced" }])
      }))

    it.effect("racing requests with one key and two bodies: one resource; the winner's body replays, the other is 422", () =>
      Effect.gen(function*() {
        const orgId = newOrg()
        const exits = yield* Effect.all(
          Array.from(
            { length: 6 },
            (_, i) =>
              Effect.exit(
                createWidget({
                  orgId,
                  key: "key-race-0002",
                  body: { name: i % 2 === 0 ? "even" : "odd" },
                  delayMs: 200
                })
              )
          ),
          { concurrency: "unbounded" }
        )
        const widgets = yield* widgetsOf(orgId)
        expect(widgets).toHaveLength(1)
        const winner = widgets[0]!.name
        exits.forEach((exit, i) => {
          const name = i % 2 === 0 ? "even" : "odd"
          if (name === winner) {
            assert(Exit.isSuccess(exit))
            expect(exit.value._tag === "Created" ? exit.value.value.id : (exit.value.body as Widget).id).toBe(
              widgets[0]!.id
            )
          } else {
            assert(Exit.isFailure(exit))
            expect(String(exit.cause)).toContain("IdempotencyKeyReused")
          }
        })
      }))

    it.effect("a create that fails keeps nothing: the key is free for the next request, whatever its body", () =>
      Effect.gen(function*() {
        const orgId = newOrg()
        const refused = yield* Effect.flip(
          createWidget({ orgId, key: "key-failed-01", body: { name: "no" }, refuse: true })
        )
        expect(refused).toBeInstanceOf(WidgetRefused)
        expect(yield* widgetsOf(orgId)).toEqual([])
        const made = createdOf(yield* createWidget({ orgId, key: "key-failed-01", body: { name: "yes" } }))
        expect(yield* widgetsOf(orgId)).toEqual([{ id: made.id, name: "yes" }])
      }))

    it.effect("keys are per org and per operation: the same key there is another resource", () =>
      Effect.gen(function*() {
        const [a, b] = [newOrg(), newOrg()]
        const body = { name: "same" }
        const inA = createdOf(yield* createWidget({ orgId: a, key: "key-shared-01", body }))
        const inB = createdOf(yield* createWidget({ orgId: b, key: "key-shared-01", body }))
        expect(inB.id).not.toBe(inA.id)
        const otherOperation = createdOf(
          yield* createWidget({ orgId: a, key: "key-shared-01", body, operation: "gadgets.create" })
        )
        expect(otherOperation.id).not.toBe(inA.id)
        // Each still replays its own.
        expect(replayedOf(yield* createWidget({ orgId: a, key: "key-shared-01", body }))).toEqual(inA)
        expect(replayedOf(yield* createWidget({ orgId: b, key: "key-shared-01", body }))).toEqual(inB)
        expect(yield* widgetsOf(a)).toHaveLength(2)
        expect(yield* widgetsOf(b)).toHaveLength(1)
      }))

    it.effect("an entry older than 24 h is gone: the key makes a new resource, and prune deletes old entries only", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const idempotency = yield* Idempotency
        const orgId = newOrg()
        const old = createdOf(yield* createWidget({ orgId, key: "key-expiry-01", body: { name: "old" } }))
        createdOf(yield* createWidget({ orgId, key: "key-expiry-02", body: { name: "kept" } }))
        const age = (key: string, hours: number) =>
          sql`UPDATE idempotency_keys SET created_at = now() - make_interval(hours => ${hours}::int) WHERE org_id = ${orgId} AND key = ${key}`
        // Just inside the window: still replayed.
        yield* age("key-expiry-01", 23)
        expect(replayedOf(yield* createWidget({ orgId, key: "key-expiry-01", body: { name: "old" } }))).toEqual(old)
        // Past it: another body is no longer 422, it makes a new resource under the key.
        yield* age("key-expiry-01", 25)
        const renewed = createdOf(yield* createWidget({ orgId, key: "key-expiry-01", body: { name: "new" } }))
        expect(renewed.id).not.toBe(old.id)
        expect(replayedOf(yield* createWidget({ orgId, key: "key-expiry-01", body: { name: "new" } }))).toEqual(renewed)
        // Pruning removes what is past the window, nothing else.
        yield* age("key-expiry-02", 25)
        expect(yield* idempotency.prune).toBe(1)
        const left = yield* sql<{ key: string }>`SELECT key FROM idempotency_keys WHERE org_id = ${orgId} ORDER BY key`
        expect(left.map((r) => r.key)).toEqual(["key-expiry-01"])
        createdOf(yield* createWidget({ orgId, key: "key-expiry-02", body: { name: "again" } }))
      }))

    it.effect("entries are sealed at rest and bound to their key: no response, secret or hash in the table", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const orgId = newOrg()
        const body = { name: "plain-name-of-the-widget" }
        const widget = createdOf(yield* createWidget({ orgId, key: "key-sealed-01", body }))
        const [row] = yield* sql<
          { entry: string }
        >`SELECT entry FROM idempotency_keys WHERE org_id = ${orgId} AND key = 'key-sealed-01'`
        expect(row!.entry).toMatch(/^v1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/)
        const table = JSON.stringify(yield* sql`SELECT * FROM idempotency_keys WHERE org_id = ${orgId}`)
        for (const plain of [widget.secret, body.name, requestHash(body)]) expect(table).not.toContain(plain)
        // Moved under another key, the entry does not open: nothing is replayed from it.
        createdOf(yield* createWidget({ orgId, key: "key-sealed-02", body }))
        yield* sql`UPDATE idempotency_keys SET entry = ${row!.entry} WHERE org_id = ${orgId} AND key = 'key-sealed-02'`
        const moved = yield* Effect.exit(createWidget({ orgId, key: "key-sealed-02", body }))
        assert(Exit.isFailure(moved))
        expect(String(moved.cause)).not.toContain(widget.secret)
      }))
  })
})
