/**
 * The Postgres client of the platform: one pool per process, configured from `DATABASE_URL`,
 * with the schema migrated before anything uses it.
 */
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as PgMigrator from "@effect/sql-pg/PgMigrator"
import { Context, Duration, Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { fromFileSystem } from "effect/sql/MigratorFileSystem"
import { fileURLToPath } from "node:url"
import { DatabaseUrl } from "./Config.ts"

export const migrationsDirectory = fileURLToPath(new URL("./migrations", import.meta.url))

/** The pool alone, from a URL. Short timeouts so that a dead database is reported, not waited on. */
export const clientLayer = (url: Redacted.Redacted) =>
  PgClient.layer({
    url,
    connectTimeout: Duration.seconds(3),
    maxConnections: 20,
    idleTimeout: Duration.seconds(30)
  })

/** Applies every pending migration of `packages/db/src/migrations` (concurrent runs are safe). */
export const migrationsLayer = PgMigrator.layer({
  loader: fromFileSystem(migrationsDirectory),
  table: "svc_migrations"
}).pipe(Layer.provide(NodeServices.layer))

/** Client + migrations, from `DATABASE_URL`. */
export const layer = Layer.unwrap(
  Effect.map(DatabaseUrl, (url) => migrationsLayer.pipe(Layer.provideMerge(clientLayer(url))))
)

export const layerFromUrl = (url: string) => migrationsLayer.pipe(Layer.provideMerge(clientLayer(Redacted.make(url))))

/** A health probe: `SELECT 1` within a deadline. */
export class DatabaseHealth extends Context.Service<DatabaseHealth, {
  readonly check: Effect.Effect<"up" | "down">
}>()("@svc/db/DatabaseHealth") {
  static readonly layer = Layer.effect(
    DatabaseHealth,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const check = sql`SELECT 1`.pipe(
        Effect.timeout(Duration.seconds(2)),
        Effect.as("up" as const),
        Effect.catchCause(() => Effect.succeed("down" as const)),
        Effect.withSpan("DatabaseHealth.check")
      )
      return DatabaseHealth.of({ check })
    })
  )
}
