/**
 * Settings of the sandboxes' control plane: the per-org quotas the api checks at create and
 * start (Sandboxes/Quota.ts), and the supervisor's pace and patience, read by the runtime role
 * (Sandboxes/Supervisor.ts).
 */
import * as Env from "@svc/config/Env"
import { Config, Duration } from "effect"
import type { Quotas } from "./Sandboxes/Quota.ts"

/** Sandboxes an org has (every state but `deleting` and `deleted`). */
export const OrgMaxSandboxes = Env.integer("SVC_ORG_MAX_SANDBOXES", 100, { min: 0 })

/** Sandboxes an org has pending, starting, running or stopping. */
export const OrgMaxRunningSandboxes = Env.integer("SVC_ORG_MAX_RUNNING_SANDBOXES", 20, { min: 0 })

export const QuotasConfig: Config.Config<Quotas> = Config.all({
  maxSandboxes: OrgMaxSandboxes,
  maxRunning: OrgMaxRunningSandboxes
})

/** How often the supervisor checks hosts, transitions and lifetimes. */
export const SupervisorInterval = Env.duration("SVC_SUPERVISOR_INTERVAL", Duration.seconds(1), {
  min: Duration.millis(10),
  max: Duration.minutes(10),
  formerly: "SVC_SUPERVISOR_INTERVAL_MS"
})

/** A sandbox stuck pending, starting, stopping or deleting this long goes to `error`. */
export const TransitionTimeout = Env.duration("SVC_SANDBOX_TRANSITION_TIMEOUT", Duration.minutes(2), {
  min: Duration.seconds(1),
  max: Duration.days(1),
  formerly: "SVC_SANDBOX_TRANSITION_TIMEOUT_S"
})

/** What the api reads. */
export const quotaSettings: ReadonlyArray<Env.AnySetting> = [OrgMaxSandboxes, OrgMaxRunningSandboxes]

/** What the runtime reads. */
export const supervisorSettings: ReadonlyArray<Env.AnySetting> = [SupervisorInterval, TransitionTimeout]
