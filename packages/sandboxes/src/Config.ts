/**
 * Settings of the sandboxes' control plane: the per-org quotas the api checks at create and
 * start (Sandboxes/Quota.ts), the preview domain (Previews.ts), and the supervisor's pace and
 * patience, read by the runtime role (Sandboxes/Supervisor.ts). Templates' settings are
 * @svc/templates/Config's.
 */
import * as Env from "@svc/config/Env"
import { Config, Duration, Effect, Schema, SchemaIssue } from "effect"
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

/**
 * Requests whose `Host` is `{port}-{sandbox_id}.<this>` go to that port of the sandbox
 * (Previews.ts). `*.localhost` names reach the loopback address in browsers and curl.
 */
export const PreviewDomain = Env.describe(
  Config.String("SVC_PREVIEW_DOMAIN").pipe(
    Config.withDefault("preview.localhost"),
    Config.mapEffect((value) =>
      /^(?=.{1,200}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/i.test(value)
        ? Effect.succeed(value.toLowerCase())
        : Effect.fail(
          new Config.ConfigError(
            new Schema.SchemaError(
              new SchemaIssue.InvalidValue({ message: `SVC_PREVIEW_DOMAIN: "${value}" is not a domain name` })
            )
          )
        )
    )
  ),
  { name: "SVC_PREVIEW_DOMAIN", default: "`preview.localhost`", format: "a domain name" }
)

/** What the api reads. */
export const quotaSettings: ReadonlyArray<Env.AnySetting> = [
  OrgMaxSandboxes,
  OrgMaxRunningSandboxes,
  PreviewDomain
]

/** What the runtime reads. */
export const supervisorSettings: ReadonlyArray<Env.AnySetting> = [SupervisorInterval, TransitionTimeout]
