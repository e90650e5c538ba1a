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
import { Config, Duration } from "effect"
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

/**
 * Of those, what one org may hold at once (more is 429 `rate_limited`, never a wait): below
 * `SVC_API_MAX_TRANSFERS`, one org can never take every slot and make another org's transfer wait.
 */
export const ApiMaxTransfersPerOrg = Env.integer("SVC_API_MAX_TRANSFERS_PER_ORG", 16, { min: 1 })

/** A file transfer that moves no byte for this long is ended (its connection closed, its slot freed). */
export const TransferIdleTimeout = Env.duration("SVC_API_TRANSFER_IDLE_TIMEOUT", Duration.seconds(60), {
  min: Duration.millis(100),
  max: Duration.hours(1)
})

/**
 * Preview requests and WebSockets one sandbox has open at once through one API process (each
 * holds two descriptors here and a tunnel on its host); one more is 429 `rate_limited`.
 */
export const PreviewConnectionsPerSandbox = Env.integer("SVC_PREVIEW_CONNECTIONS_PER_SANDBOX", 256, { min: 1 })

/** A preview request or WebSocket whose tunnel moves no byte either way for this long is ended. */
export const PreviewIdleTimeout = Env.duration("SVC_PREVIEW_IDLE_TIMEOUT", Duration.minutes(2), {
  min: Duration.millis(100),
  max: Duration.hours(24)
})

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
  ApiMaxTransfersPerOrg,
  TransferIdleTimeout,
  PreviewConnectionsPerSandbox,
  PreviewIdleTimeout,
  DashboardDir,
  ...Auth.settings,
  ...Sandboxes.quotaSettings,
  // How long a call that resumes a stopped sandbox (`auto_resume`) waits for it to run.
  Sandboxes.TransitionTimeout,
  ...Templates.templateSettings,
  Webhooks.AllowedSubnets,
  ...Secrets.settings,
  ...Volumes.settings,
  ...Telemetry.settings
]
