import { describe, expect, layer } from "@effect/vitest"
import { DatabaseHealth } from "@svc/db/Database"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"

describe("Database", () => {
  layer(DatabaseHealth.layer.pipe(Layer.provideMerge(TestDatabase.layer)), { excludeTestServices: true })((it) => {
    it.effect("applies the migrations: the orgs and outbox tables exist", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const tables = yield* sql<{ tablename: string }>`
          SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`
        const names = tables.map((t) => t.tablename)
        expect(names).toContain("orgs")
        expect(names).toContain("outbox")
        expect(names).toContain("svc_migrations")
      }))

    it.effect("reports up when the database answers", () =>
      Effect.gen(function*() {
        const health = yield* DatabaseHealth
        expect(yield* health.check).toBe("up")
      }))
  })
})
