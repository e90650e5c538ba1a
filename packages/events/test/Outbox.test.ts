import { describe, expect, it, layer } from "@effect/vitest"
import * as Outbox from "@svc/events/Outbox"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"

const ORG = "org_0000000000aaaaaaaaaaaaaaaa"

describe("Outbox (pure parts)", () => {
  it.effect("builds the envelope of docs/contract.md#envelope with an ISO 8601 UTC millisecond timestamp", () =>
    Effect.gen(function*() {
      const env = yield* Outbox.makeEnvelope(
        { event: "sandbox.deleted", orgId: ORG, data: { sandbox_id: "sbx_1" } },
        Date.UTC(2026, 10, 22, 1, 2, 3, 4)
      )
      expect(env).toEqual({
        event: "sandbox.deleted",
        org_id: ORG,
        ts: "2026-11-22T01:02:03.004Z",
        data: { sandbox_id: "sbx_1" }
      })
      expect(Outbox.eventSubject(ORG, "sandbox.deleted").join(".")).toBe(`evt.${ORG}.sandbox.deleted`)
    }))

  it.effect("refuses event names that are patterns or malformed, org ids that are not one token, and non-object data", () =>
    Effect.gen(function*() {
      for (
        const event of [
          "sandbox.*",
          "*",
          "Sandbox.created",
          "sandbox..created",
          "sandbox.created.",
          "",
          "sandbox created",
          "a>b"
        ]
      ) {
        const e = yield* Effect.flip(Outbox.makeEnvelope({ event, orgId: ORG, data: {} }, 0))
        expect(e._tag).toBe("InvalidOutboxMessage")
      }
      for (const orgId of ["org.x", "org*", ">", "", "org x"]) {
        const e = yield* Effect.flip(Outbox.makeEnvelope({ event: "ping", orgId, data: {} }, 0))
        expect(e._tag).toBe("InvalidOutboxMessage")
      }
      const e = yield* Effect.flip(Outbox.makeEnvelope({ event: "ping", orgId: ORG, data: [1] as never }, 0))
      expect(e.message).toContain("object")
    }))

  it.effect("checks subject tokens", () =>
    Effect.gen(function*() {
      expect(yield* Outbox.subjectOf(["actor", "counter", "3", "c-1"])).toBe("actor.counter.3.c-1")
      expect(yield* Outbox.subjectOf("evt.org_1.sandbox.created")).toBe("evt.org_1.sandbox.created")
      for (const bad of [["evt", "a.*"], ["evt", ">"], ["evt", ""], ["evt", "a b"], "evt..x", "x".repeat(300)]) {
        expect((yield* Effect.flip(Outbox.subjectOf(bad)))._tag).toBe("InvalidOutboxMessage")
      }
    }))

  it("makes time-sortable unique ids", () => {
    const ids = Array.from({ length: 1000 }, () => Outbox.makeOutboxId(Date.now()))
    expect(new Set(ids).size).toBe(1000)
    expect([...ids].sort()).toEqual(ids)
    expect(ids[0]).toMatch(/^obx_[0-9a-hjkmnp-tv-z]{26}$/)
  })
})

describe("Outbox (in Postgres)", () => {
  layer(TestDatabase.layer, { excludeTestServices: true })((it) => {
    it.effect("writes rows in the caller's transaction: a rollback leaves nothing, a commit keeps order", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const boom = yield* Effect.flip(sql.withTransaction(Effect.gen(function*() {
          yield* Outbox.append({ subject: ["x", "rolled"], payload: { n: 0 } })
          yield* Outbox.appendEvent({ event: "ping", orgId: ORG, data: {} })
          return yield* Effect.fail("boom" as const)
        })))
        expect(boom).toBe("boom")
        expect(yield* sql`SELECT id FROM outbox`).toEqual([])

        const rows = yield* sql.withTransaction(Outbox.appendAll([
          { subject: ["x", "a"], payload: { n: 1 } },
          { subject: "x.b", payload: [1, "two", null] },
          { subject: ["x", "c"], payload: "text" }
        ]))
        const stored = yield* sql<{ id: string; subject: string; payload: string }>`
          SELECT id, subject, payload::text AS payload FROM outbox ORDER BY seq`
        expect(stored.map((r) => r.id)).toEqual(rows.map((r) => r.id))
        expect(stored.map((r) => [r.subject, JSON.parse(r.payload)])).toEqual([
          ["x.a", { n: 1 }],
          ["x.b", [1, "two", null]],
          ["x.c", "text"]
        ])
      }))

    it.effect("insertFrom: in one statement, the row exactly when the change happened; prepare refuses what appendAll refuses", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const count = Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox`, (rows) => rows[0]!.n)
        const before = yield* count
        // A change that matched nothing: no row.
        const none = yield* Outbox.prepare({ subject: ["x", "never"], payload: { n: 0 } })
        const nothing = yield* sql`
          WITH changed AS (SELECT 1 AS one WHERE false), queued AS (${Outbox.insertFrom(sql, none, "changed")})
          SELECT id FROM queued`
        expect(nothing).toEqual([])
        expect(yield* count).toBe(before)
        // A change that happened: its row, with the message as prepared.
        const one = yield* Outbox.prepare({ subject: ["x", "once"], payload: { n: 1, s: "two" } })
        const queued = yield* sql<{ id: string }>`
          WITH changed AS (SELECT 1 AS one), queued AS (${Outbox.insertFrom(sql, one, "changed")})
          SELECT id FROM queued`
        expect(queued.map((r) => r.id)).toEqual([one.id])
        const stored = yield* sql<{ subject: string; payload: string; kv: string | null }>`
          SELECT subject, payload::text AS payload, kv FROM outbox WHERE id = ${one.id}`
        expect(stored.map((r) => [r.subject, JSON.parse(r.payload), r.kv])).toEqual([[
          "x.once",
          { n: 1, s: "two" },
          null
        ]])
        for (const bad of [{ subject: "evt.>", payload: 1 }, { subject: "ok.one", payload: 10n }]) {
          expect((yield* Effect.flip(Outbox.prepare(bad)))._tag).toBe("InvalidOutboxMessage")
        }
      }))

    it.effect("refuses an invalid message without writing any of the batch", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const before = (yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox`)[0]!.n
        const cyclic: Record<string, unknown> = {}
        cyclic.self = cyclic
        for (
          const bad of [
            [{ subject: "ok.one", payload: 1 }, { subject: "evt.>", payload: 1 }],
            [{ subject: "ok.one", payload: 1 }, { subject: "ok.two", payload: cyclic }],
            [{ subject: "ok.one", payload: 10n }],
            [{ subject: "ok.one", payload: undefined }]
          ]
        ) {
          const e = yield* Effect.flip(Outbox.appendAll(bad))
          expect(e._tag).toBe("InvalidOutboxMessage")
        }
        expect((yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox`)[0]!.n).toBe(before)
      }))

    it.effect("typed events encode their data through the schema and refuse what does not fit", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const Deleted = Outbox.defineEvent(
          "sandbox.deleted",
          Schema.Struct({ sandbox_id: Schema.String, host_id: Schema.String })
        )
        const row = yield* Deleted.append(ORG, { sandbox_id: "sbx_1", host_id: "host_1" })
        expect(row.subject).toBe(`evt.${ORG}.sandbox.deleted`)
        const [stored] = yield* sql<
          { payload: string }
        >`SELECT payload::text AS payload FROM outbox WHERE id = ${row.id}`
        const envelope = yield* Schema.decodeUnknownEffect(Schema.fromJsonString(Deleted.envelope))(stored!.payload)
        expect(envelope.data).toEqual({ sandbox_id: "sbx_1", host_id: "host_1" })
        expect(envelope.ts).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
        const bad = yield* Effect.flip(Deleted.append(ORG, { sandbox_id: 1 } as never))
        expect(bad._tag).toBe("InvalidOutboxMessage")
      }))
  })
})
