/**
 * Apps (docs/contract.md#apps): long-running deployments. An app keeps `replicas` sandboxes of
 * its template running its `cmd`; the record, the create and update bodies, the list.
 *
 * Decisions of this contract:
 * - `name`: 1 to 63 of `[a-z0-9-]`, starting with a letter or digit (a DNS label: replicas are
 *   named `<name>-<n>`), unique among the org's apps that are not deleted (409).
 * - `template`: a template id or name the org can use (`base`, `debian`, or a ready template of
 *   its own); anything else is 400 naming `template`.
 * - `cmd`: an argv like exec's; it is started in each replica once the sandbox runs.
 * - `replicas`: 0 to `MAX_APP_REPLICAS`, default 1. `env`: like a sandbox's (never shown in the
 *   record: it may carry credentials). `exposed_ports`: like a sandbox's, on every replica.
 * - PATCH replaces what it names: `env` is the whole new map. A new `cmd` or `env` rolls the
 *   replicas over one at a time (`revision` counts these changes).
 *
 * The record adds `exposed_ports`, `revision` and `reason` (why the app is not `running`, for
 * people; null when it is) to the fields of the contract. `state`:
 * - `deploying`: working toward the spec (a new app, a scale-up, a rolling update) with no
 *   replica lost on the way;
 * - `running`: `ready_replicas` = `replicas`, every replica of the current revision;
 * - `degraded`: fewer ready replicas than wanted because replicas failed or the platform refuses
 *   new ones (the org is blocked at its usage limit, a quota is reached): `reason` says which;
 * - `deleting`: its sandboxes are being deleted; `deleted` (the answer of a DELETE that found
 *   nothing left to delete): gone.
 * A replica is ready while its sandbox is `running` and its `cmd` runs.
 */
import { Effect, Schema } from "effect"
import { AppId, SandboxId } from "./Ids.ts"
import { Page } from "./Pagination.ts"
import { ExecRequest, MAX_EXPOSED_PORTS, Port } from "./Sandbox.ts"
import { Bounded, enforcedMax, EnvVars, MAX_RECORD_NAME, Truncated } from "./Text.ts"
import { Timestamp } from "./Time.ts"

export const MAX_APP_REPLICAS = 100

export const APP_STATES = ["deploying", "running", "degraded", "deleting", "deleted"] as const
export const AppState = Schema.Literals(APP_STATES)
export type AppState = typeof AppState.Type

export const AppName = Schema.String.check(
  enforcedMax(63),
  Schema.isPattern(/^[a-z0-9][a-z0-9-]{0,62}$/, {
    expected: "1 to 63 of a-z, 0-9 and -, starting with a letter or digit"
  })
)

export const AppCmd = ExecRequest.fields.cmd

export const Replicas = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: MAX_APP_REPLICAS }))

const ExposedPorts = Schema.Array(Port).check(
  Schema.isMaxLength(MAX_EXPOSED_PORTS),
  Schema.makeFilter((ports: ReadonlyArray<number>) => {
    const i = ports.findIndex((p, j) => ports.indexOf(p) !== j)
    return i < 0 || { path: [i], issue: "duplicate port" }
  })
)

export const App = Schema.Struct({
  id: AppId,
  name: Bounded(63),
  template: Bounded(MAX_RECORD_NAME),
  cmd: AppCmd,
  replicas: Schema.Int,
  ready_replicas: Schema.Int,
  state: AppState,
  sandbox_ids: Schema.Array(SandboxId).check(Schema.isMaxLength(MAX_APP_REPLICAS)),
  exposed_ports: Schema.Array(Schema.Int).check(Schema.isMaxLength(MAX_EXPOSED_PORTS)),
  revision: Schema.Int,
  reason: Schema.NullOr(Truncated(1024)),
  createdAt: Timestamp,
  updatedAt: Timestamp
})
export type App = typeof App.Type

export const AppList = Page("apps", App)
export type AppList = typeof AppList.Type

/** Body of POST /v1/apps (defaults applied when decoding). */
export const CreateAppRequest = Schema.Struct({
  name: AppName,
  /** A template id or name. */
  template: Schema.String.check(
    enforcedMax(120),
    Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,119}$/, {
      expected: "a template id or name"
    })
  ),
  cmd: AppCmd,
  replicas: Replicas.pipe(Schema.withDecodingDefaultKey(Effect.succeed(1))),
  env: EnvVars.pipe(Schema.withDecodingDefaultKey(Effect.succeed({}))),
  exposed_ports: ExposedPorts.pipe(Schema.withDecodingDefaultKey(Effect.succeed([])))
})
export type CreateAppRequest = typeof CreateAppRequest.Type

/** Body of PATCH /v1/apps/{id}: what it names is replaced. */
export const UpdateAppRequest = Schema.Struct({
  replicas: Schema.optionalKey(Replicas),
  env: Schema.optionalKey(EnvVars),
  cmd: Schema.optionalKey(AppCmd)
})
export type UpdateAppRequest = typeof UpdateAppRequest.Type
