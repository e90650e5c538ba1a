/**
 * The dispatcher role has no setting of its own: `variables` lists every variable it reads
 * through its packages (the bus, the database, the keys and every `SVC_WEBHOOK_*` setting).
 */
import * as Bus from "@svc/bus/Config"
import type * as Env from "@svc/config/Env"
import * as Crypto from "@svc/crypto/Config"
import * as Db from "@svc/db/Config"
import * as Webhooks from "@svc/webhooks/Config"

export const variables: ReadonlyArray<Env.Variable> = [
  ...Bus.variables,
  ...Db.variables,
  ...Crypto.variables,
  ...Webhooks.variables
]
