/**
 * The runtime role's settings: how soon a message held by a dead runtime process comes back.
 * `settings` lists every variable the role reads, its own and its packages' (the supervisor's
 * pace and patience are the sandboxes package's, the meter's pace and prices the billing package's).
 */
import { DEFAULT_ACK_WAIT } from "@svc/actors/Actors"
import * as Apps from "@svc/apps/Config"
import * as Billing from "@svc/billing/Config"
import * as Bus from "@svc/bus/Config"
import * as Env from "@svc/config/Env"
import * as Crypto from "@svc/crypto/Config"
import * as Db from "@svc/db/Config"
import * as Sandboxes from "@svc/sandboxes/Config"
import * as Telemetry from "@svc/telemetry/Config"
import * as Templates from "@svc/templates/Config"
import { Duration } from "effect"

/** The actors' mailbox ack wait: a message held by a runtime process that died is redelivered after it. */
export const ActorAckWait = Env.duration("SVC_ACTOR_ACK_WAIT", DEFAULT_ACK_WAIT, {
  min: Duration.millis(100),
  max: Duration.hours(1),
  formerly: "SVC_ACTOR_ACK_WAIT_MS"
})

export const settings: ReadonlyArray<Env.AnySetting> = [
  ...Bus.settings,
  ...Db.settings,
  ActorAckWait,
  ...Sandboxes.supervisorSettings,
  // The app controller makes replicas through the sandboxes' own create: their quotas and templates.
  Sandboxes.OrgMaxSandboxes,
  Sandboxes.OrgMaxRunningSandboxes,
  Templates.TemplateBuildTimeout,
  Templates.ImageGcGrace,
  ...Billing.settings,
  ...Apps.settings,
  ...Crypto.settings,
  ...Telemetry.settings
]
