/**
 * Rows decoded at the SQL boundary, on a real Postgres: the column schemas accept what the
 * driver returns, and a row its schema refuses is a `RowDecodeError` naming the query (never a value
 * passed on, never a `SchemaError` that the API would take for the request's fault).
 */
import { assert, describe, expect, layer } from "@effect/vitest"
import * as Rows from "@svc/db/Rows"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { Effect, Exit, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"

const Thing = Schema.Struct({
  id: Schema.String,
  n: Rows.Int8,
  count: Schema.Int,
  at: Rows.Timestamptz,
  data: Schema.Struct({ ports: Schema.Array(Schema.Int) }),
  tags: Schema.Array(Schema.String),
  gone: Schema.NullOr(Rows.Timestamptz)
})

layer(TestDatabase.layer, { excludeTestServices: true })("Rows", (it) => {
  describe("findAll, findOneOption, decoder", () => {
    it.effect("decode int8, timestamptz, jsonb, text[] and nulls as the driver returns them", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const things = (ids: ReadonlyArray<string>) =>
          sql`SELECT id, 12::bigint AS n, 3::int AS count, '2024-05-06T07:08:09.123Z'::timestamptz AS at,
                     '{"ports":[80,443]}'::jsonb AS data, ARRAY['a','b']::text[] AS tags, NULL::timestamptz AS gone
              FROM unnest(${ids}::text[]) AS id ORDER BY id`
        const all = Rows.findAll("Test.all", { Request: Schema.Array(Schema.String), Result: Thing, execute: things })
        const one = Rows.findOneOption("Test.one", {
          Request: Schema.String,
          Result: Thing,
          execute: (id) => things([id])
        })
        const inline = Rows.decoder("Test.inline", Thing)

        const rows = yield* all(["x", "y"])
        const at = new Date("2024-05-06T07:08:09.123Z")
        expect(rows).toEqual([
          { id: "x", n: 12n, count: 3, at, data: { ports: [80, 443] }, tags: ["a", "b"], gone: null },
          { id: "y", n: 12n, count: 3, at, data: { ports: [80, 443] }, tags: ["a", "b"], gone: null }
        ])
        expect(Option.map(yield* one("z"), (t) => t.id)).toEqual(Option.some("z"))
        expect(
          yield* Rows.findOneOption("Test.none", {
            Request: Schema.Void,
            Result: Thing,
            execute: () => things([])
          })(undefined)
        ).toEqual(Option.none())
        expect((yield* inline(things(["w"]))).map((t) => t.id)).toEqual(["w"])
      }))

    it.effect("a row its schema refuses is a RowDecodeError naming the query", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // `n` as text, `at` as text: what a migration out of step with the code would return.
        const wrongInt8 = () =>
          sql`SELECT 'x' AS id, '12' AS n, 3::int AS count, now() AS at, '{"ports":[]}'::jsonb AS data,
                     ARRAY[]::text[] AS tags, NULL::timestamptz AS gone`
        const wrongDate = () =>
          sql`SELECT 'x' AS id, 12::bigint AS n, 3::int AS count, now()::text AS at, '{"ports":[]}'::jsonb AS data,
                     ARRAY[]::text[] AS tags, NULL::timestamptz AS gone`
        for (
          const run of [
            Rows.findAll("Test.wrongAll", { Request: Schema.Void, Result: Thing, execute: wrongInt8 })(undefined),
            Rows.findOneOption("Test.wrongAll", { Request: Schema.Void, Result: Thing, execute: wrongDate })(undefined),
            Rows.decoder("Test.wrongAll", Thing)(wrongInt8()),
            Rows.decoder("Test.wrongAll", Thing)(wrongDate())
          ] as ReadonlyArray<Effect.Effect<unknown, unknown>>
        ) {
          const exit = yield* Effect.exit(run)
          assert(Exit.isFailure(exit))
          const error = exit.cause.reasons[0]
          assert(error !== undefined && error._tag === "Fail")
          expect(error.error).toBeInstanceOf(Rows.RowDecodeError)
          expect(error.error).toMatchObject({ _tag: "RowDecodeError", query: "Test.wrongAll" })
          expect(Schema.isSchemaError(error.error)).toBe(false)
        }
      }))
  })
})
