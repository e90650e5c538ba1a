/**
 * The dispatcher role has no setting of its own: `settings` lists every variable it reads
 * through its packages (the bus, the database, the keys and every `SVC_WEBHOOK_*` setting).
 */
import * as Bus from "@svc/bus/Config"
import type * as Env from "@svc/config/Env"
import * as Crypto from "@svc/crypto/Config"
import * as Db from "@svc/db/Config"
import * as Telemetry from "@svc/telemetry/Config"
import * as Webhooks from "@svc/webhooks/Config"

export const settings: ReadonlyArray<Env.AnySetting> = [
  ...Bus.settings,
  ...Db.settings,
  ...Crypto.settings,
  ...Webhooks.settings,
  ...Telemetry.settings
]
