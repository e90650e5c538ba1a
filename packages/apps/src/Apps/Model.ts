/**
 * The app controller's state, its messages and the operations it asks for: Schemas without
 * services, shared by the pure transition (`Reconcile.ts`), its store (the `apps` row) and the
 * I/O around it (`Operations.ts`, `Watch.ts`).
 */
import { StopReason } from "@svc/domain/Lifecycle"
import { SandboxState } from "@svc/domain/Sandbox"
import { Schema } from "effect"

/**
 * One replica the controller keeps: a sandbox it created.
 * - `starting`: the sandbox is not running yet;
 * - `launching`: it runs, and the app's `cmd` is being started in it (`launchOp`);
 * - `ready`: the `cmd` runs (`pid`, as the sandbox sees it);
 * - `removing`: it is being deleted (failed, surplus, or of an older revision): it counts for
 *   nothing any more, and is kept until its sandbox is seen deleted (a delete that did not go
 *   through, e.g. its host did not answer, is asked again).
 */
export const ReplicaPhase = Schema.Literals(["starting", "launching", "ready", "removing"])
export type ReplicaPhase = typeof ReplicaPhase.Type

export const Replica = Schema.Struct({
  sandboxId: Schema.String,
  /** The app's revision (cmd and env) it was made for. */
  revision: Schema.Int,
  phase: ReplicaPhase,
  /** When it entered its phase (ms). */
  since: Schema.Number,
  pid: Schema.NullOr(Schema.String),
  /** The operation in flight for it (launch or remove). */
  op: Schema.NullOr(Schema.String)
})
export type Replica = typeof Replica.Type

/** A replica asked for whose sandbox is not known yet. */
export const PendingCreate = Schema.Struct({ opId: Schema.String, revision: Schema.Int })
export type PendingCreate = typeof PendingCreate.Type

export const AppPhase = Schema.Literals(["active", "deleting", "deleted"])
export type AppPhase = typeof AppPhase.Type

export const AppControllerState = Schema.Struct({
  id: Schema.String,
  orgId: Schema.String,
  name: Schema.String,
  template: Schema.String,
  cmd: Schema.Array(Schema.String),
  /** The env, sealed with the platform's key (`app-env:<id>`): it may hold credentials. */
  sealedEnv: Schema.String,
  exposedPorts: Schema.Array(Schema.Int),
  replicas: Schema.Int,
  revision: Schema.Int,
  phase: AppPhase,
  members: Schema.Array(Replica),
  creating: Schema.Array(PendingCreate),
  /** Numbers the operations (`<appId>.<n>`), so each has an id of its own. */
  nextOp: Schema.Int,
  /** Failures in a row (refused creates, replicas that died young): the backoff's exponent. */
  failures: Schema.Int,
  /** No new replica before this time (ms), after failures. */
  retryAt: Schema.NullOr(Schema.Number),
  /** The last create was refused because the org is blocked at its usage limit. */
  blocked: Schema.Boolean,
  /** Why the app lost or could not get replicas since it last ran as asked; null when nothing went wrong. */
  trouble: Schema.NullOr(Schema.String),
  /** The observation in flight, and since when (a lost one is asked again). */
  observing: Schema.NullOr(Schema.Struct({ opId: Schema.String, since: Schema.Number })),
  createdAt: Schema.Number,
  /** When what the record shows last changed. */
  updatedAt: Schema.Number
})
export type AppControllerState = typeof AppControllerState.Type

// ---------------------------------------------------------------------------------------------
// Messages

/** What a replica's sandbox and cmd were found to be. `missing`: no such sandbox any more. */
export const ObservedReplica = Schema.Struct({
  sandboxId: Schema.String,
  sandbox: Schema.Union([SandboxState, Schema.Literal("missing")]),
  /** The pid that was checked (null when none was). */
  pid: Schema.NullOr(Schema.String),
  /** `unknown`: could not tell (the host did not answer); `none`: nothing was checked. */
  process: Schema.Literals(["running", "exited", "unknown", "none"]),
  /** Why its sandbox last stopped (`stop_reason`), when it did. */
  reason: Schema.optionalKey(Schema.NullOr(StopReason))
})
export type ObservedReplica = typeof ObservedReplica.Type

export const AppMessage = Schema.Union([
  /** From the API (applied in its request): the new spec. `sealedEnv` only when the env changed. */
  Schema.TaggedStruct("Update", {
    replicas: Schema.optionalKey(Schema.Int),
    cmd: Schema.optionalKey(Schema.Array(Schema.String)),
    sealedEnv: Schema.optionalKey(Schema.String)
  }),
  /** From the API: delete the app and its sandboxes. */
  Schema.TaggedStruct("Delete", {}),
  /** The periodic reconcile: observe the replicas, create what is due. */
  Schema.TaggedStruct("Tick", {}),
  /** A replica's sandbox changed state (its `sandbox.state_updated` event). */
  Schema.TaggedStruct("SandboxChanged", {
    sandboxId: Schema.String,
    state: SandboxState,
    /** The event's `reason`: why it stopped (`oom`, `idle`...). */
    reason: Schema.optionalKey(Schema.NullOr(StopReason))
  }),
  Schema.TaggedStruct("Observed", { opId: Schema.String, replicas: Schema.Array(ObservedReplica) }),
  Schema.TaggedStruct("ReplicaCreated", { opId: Schema.String, sandboxId: Schema.String }),
  /** The platform refused the sandbox; `blocked`: because the org is at its hard usage limit. */
  Schema.TaggedStruct("CreateRefused", { opId: Schema.String, reason: Schema.String, blocked: Schema.Boolean }),
  Schema.TaggedStruct("Launched", { opId: Schema.String, sandboxId: Schema.String, pid: Schema.String }),
  Schema.TaggedStruct("LaunchFailed", { opId: Schema.String, sandboxId: Schema.String, reason: Schema.String }),
  /** The delete was taken; `deleted`: the sandbox is gone already (else it is being deleted). */
  Schema.TaggedStruct("Removed", { opId: Schema.String, sandboxId: Schema.String, deleted: Schema.Boolean })
])
export type AppMessage = typeof AppMessage.Type

// ---------------------------------------------------------------------------------------------
// Operations: what the controller asks the executor to do (`appop.<appId>.<kind>`)

export const CreateReplicaOp = Schema.TaggedStruct("CreateReplica", {
  opId: Schema.String,
  appId: Schema.String,
  orgId: Schema.String,
  revision: Schema.Int,
  /** The sandbox's name: `<app name>-<n>`. */
  name: Schema.String,
  template: Schema.String,
  sealedEnv: Schema.String,
  exposedPorts: Schema.Array(Schema.Int)
})

export const LaunchCmdOp = Schema.TaggedStruct("LaunchCmd", {
  opId: Schema.String,
  appId: Schema.String,
  orgId: Schema.String,
  sandboxId: Schema.String,
  cmd: Schema.Array(Schema.String)
})

export const RemoveReplicaOp = Schema.TaggedStruct("RemoveReplica", {
  opId: Schema.String,
  appId: Schema.String,
  orgId: Schema.String,
  sandboxId: Schema.String
})

export const ObserveOp = Schema.TaggedStruct("Observe", {
  opId: Schema.String,
  appId: Schema.String,
  orgId: Schema.String,
  replicas: Schema.Array(Schema.Struct({ sandboxId: Schema.String, pid: Schema.NullOr(Schema.String) }))
})

export const AppOperation = Schema.Union([CreateReplicaOp, LaunchCmdOp, RemoveReplicaOp, ObserveOp])
export type AppOperation = typeof AppOperation.Type

/** The subject tokens of an operation (relative to the NATS prefix). */
export const OPERATIONS_SUBJECT = "appop"
export const operationSubject = (op: AppOperation): ReadonlyArray<string> => [OPERATIONS_SUBJECT, op.appId, op._tag]

/** The metadata key that names a replica's app on its sandbox. */
export const APP_METADATA_KEY = "app_id"
