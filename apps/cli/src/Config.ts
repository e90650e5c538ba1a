/**
 * The CLI's settings: where `svc dev` keeps its state and which ports it prefers for its own
 * NATS and Postgres, and what `svc sandbox` / `svc webhook` talk to. `svc dev` runs every role,
 * so it reads their settings too (each role's `Config.ts`); the operator commands (`svc org
 * create`, `svc key create`) read `DATABASE_URL`. What the user's commands read is defined in
 * `Client/Config.ts` (no server package there) and listed here with the rest.
 */
import * as Env from "@svc/config/Env"
import * as Db from "@svc/db/Config"
import { Config } from "effect"
import { ApiKey, ApiUrl, StateDir } from "./Client/Config.ts"

export { ApiKey, ApiUrl, DEFAULT_API_URL, DEFAULT_STATE_DIR, StateDir } from "./Client/Config.ts"

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

/** What `svc dev` reads besides the roles' settings. */
export const devSettings: ReadonlyArray<Env.AnySetting> = [StateDir, DevNatsPort, DevPostgresPort]

/** What the other `svc` commands read: the client's credentials, the operator's database. */
export const commandSettings: ReadonlyArray<Env.AnySetting> = [ApiUrl, ApiKey, StateDir, ...Db.settings]
