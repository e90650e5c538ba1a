/**
 * The CLI's settings: where `svc dev` keeps its state and which ports it prefers for its own
 * NATS and Postgres, and what `svc sandbox` / `svc webhook` talk to. `svc dev` runs every role,
 * so it reads their settings too (each role's `Config.ts`); the operator commands (`svc org`,
 * `svc key`) read `DATABASE_URL`.
 */
import * as Env from "@svc/config/Env"
import * as Db from "@svc/db/Config"
import * as SdkConfig from "@svc/sdk/Config"
import { Config } from "effect"
import * as NodePath from "node:path"

/** Relative to the working directory (`npm start` and `npm run svc` run in the repository). */
export const DEFAULT_STATE_DIR = ".svc"

export const StateDir = Env.describe(
  Config.String("SVC_STATE_DIR").pipe(
    Config.withDefault(DEFAULT_STATE_DIR),
    Config.map((dir) => NodePath.resolve(dir))
  ),
  { name: "SVC_STATE_DIR", default: "`.svc` of the working directory", format: "path" }
)

export const DevNatsPort = Env.describe(Config.Port("SVC_DEV_NATS_PORT").pipe(Config.withDefault(14222)), {
  name: "SVC_DEV_NATS_PORT",
  default: "`14222`",
  format: "port"
})

export const DevPostgresPort = Env.describe(Config.Port("SVC_DEV_PG_PORT").pipe(Config.withDefault(15432)), {
  name: "SVC_DEV_PG_PORT",
  default: "`15432`",
  format: "port"
})

/** The API's base URL when `SVC_API_KEY` is set without it. */
export const DEFAULT_API_URL = SdkConfig.DEFAULT_BASE_URL

// The SDK's own settings, described for the README's table here.
export const ApiUrl = Env.describe(SdkConfig.ApiUrl, {
  name: SdkConfig.API_URL_VARIABLE,
  default: "`.svc/dev-credentials.json`'s, else `http://127.0.0.1:8080`",
  format: "URL"
})

export const ApiKey = Env.describe(SdkConfig.ApiKey, {
  name: SdkConfig.API_KEY_VARIABLE,
  default: "`.svc/dev-credentials.json`'s",
  format: "API key"
})

/** What `svc dev` reads besides the roles' settings. */
export const devSettings: ReadonlyArray<Env.AnySetting> = [StateDir, DevNatsPort, DevPostgresPort]

/** What the other `svc` commands read: the client's credentials, the operator's database. */
export const commandSettings: ReadonlyArray<Env.AnySetting> = [ApiUrl, ApiKey, StateDir, ...Db.settings]
