/** The database package's one setting: where Postgres is (`DATABASE_URL`, migrated at start-up). */
import * as Env from "@svc/config/Env"
import { Config, Redacted } from "effect"

export const DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/postgres"

const databaseUrl = Config.Redacted("DATABASE_URL")

/** `DATABASE_URL` when it is set (`svc dev` starts a Postgres of its own otherwise). */
export const DatabaseUrlIfSet = Config.option(databaseUrl)

export const DatabaseUrl = Env.describe(databaseUrl.pipe(Config.withDefault(Redacted.make(DEFAULT_DATABASE_URL))), {
  name: "DATABASE_URL",
  default: "`postgres://postgres@127.0.0.1:5432/postgres` (svc dev: a Postgres of its own)",
  format: "URL"
})

export const settings: ReadonlyArray<Env.AnySetting> = [DatabaseUrl]
