/**
 * A fresh, migrated database per test file (or per `layer` use) on the run's shared Postgres
 * server (`DATABASE_URL`, or the one GlobalSetup started), dropped at the end of the scope.
 * Outside a vitest run with neither, a server of its own is started and stopped.
 */
import * as Database from "@svc/db/Database"
import { startPostgres } from "@svc/local-servers/Servers"
import { Context, Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { randomBytes } from "node:crypto"

const serverUrl = Effect.acquireRelease(
  Effect.promise(async () => {
    const url = process.env.DATABASE_URL ?? process.env.SVC_TEST_DATABASE_URL
    if (url) return { url, close: async () => {} }
    const pg = await startPostgres()
    return { url: pg.url, close: pg.close }
  }),
  (server) => Effect.promise(server.close)
)

export const databaseUrl = (serverUrl: string, database: string) => {
  const u = new URL(serverUrl)
  u.pathname = `/${database}`
  return u.toString()
}

/** Creates an empty database, yields its URL, drops it (with its connections) at scope end. */
export const freshDatabase = Effect.gen(function*() {
  const server = yield* serverUrl
  const name = `svc_test_${Date.now().toString(36)}_${randomBytes(4).toString("hex")}`
  const admin = yield* Layer.build(Database.clientLayer(Redacted.make(server.url)))
  const sql = Context.get(admin, SqlClient.SqlClient)
  yield* sql.unsafe(`CREATE DATABASE "${name}"`)
  yield* Effect.addFinalizer(() => Effect.ignore(sql.unsafe(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`)))
  return databaseUrl(server.url, name)
}).pipe(Effect.orDie)

/** SqlClient + PgClient on a fresh migrated database. */
export const layer = Layer.unwrap(Effect.map(freshDatabase, Database.layerFromUrl)).pipe(Layer.orDie)

/** `layer` plus the URL, for tests that start other processes against the same database. */
export class TestDatabaseUrl extends Context.Service<TestDatabaseUrl, string>()("@svc/testing/TestDatabaseUrl") {}

export const layerWithUrl = Layer.unwrap(
  Effect.map(freshDatabase, (url) => Layer.merge(Database.layerFromUrl(url), Layer.succeed(TestDatabaseUrl, url)))
).pipe(Layer.orDie)
