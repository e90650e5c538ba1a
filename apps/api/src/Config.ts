/**
 * The api role's settings: where it listens and how many file transfers one process streams at
 * once. `settings` lists every variable the role reads, its own and its packages'.
 */
import * as Auth from "@svc/auth/Config"
import * as Bus from "@svc/bus/Config"
import * as Env from "@svc/config/Env"
import * as Crypto from "@svc/crypto/Config"
import * as Db from "@svc/db/Config"
import * as Sandboxes from "@svc/sandboxes/Config"
import * as Secrets from "@svc/secrets/Config"
import * as Telemetry from "@svc/telemetry/Config"
import * as Templates from "@svc/templates/Config"
import * as Volumes from "@svc/volumes/Config"
import * as Webhooks from "@svc/webhooks/Config"
import { Config } from "effect"
import * as NodePath from "node:path"

export const ApiPort = Env.describe(Config.Port("SVC_PORT").pipe(Config.withDefault(8080)), {
  name: "SVC_PORT",
  default: "`8080`",
  format: "port"
})

/** The listen address; also what `SVC_COOKIE_SECURE=auto` looks at (loopback: not Secure). */
export const ApiHost = Env.text("SVC_HOST", "127.0.0.1", "address")

/** File uploads and downloads one API process streams at once. */
export const ApiMaxTransfers = Env.integer("SVC_API_MAX_TRANSFERS", 64, { min: 1 })

/** The dashboard's built files (apps/dashboard, `npm start` and `npm test` build them), served at `/`. */
export const DashboardDir = Env.describe(
  Config.String("SVC_DASHBOARD_DIR").pipe(
    Config.withDefault(NodePath.resolve(import.meta.dirname, "../../dashboard/dist"))
  ),
  { name: "SVC_DASHBOARD_DIR", default: "`apps/dashboard/dist` of the checkout", format: "path" }
)

export const settings: ReadonlyArray<Env.AnySetting> = [
  ...Bus.settings,
  ...Db.settings,
  ...Crypto.settings,
  ApiPort,
  ApiHost,
  ApiMaxTransfers,
  DashboardDir,
  ...Auth.settings,
  ...Sandboxes.quotaSettings,
  ...Templates.templateSettings,
  Webhooks.AllowedSubnets,
  ...Secrets.settings,
  ...Volumes.settings,
  ...Telemetry.settings
]
