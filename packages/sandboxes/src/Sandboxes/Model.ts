/**
 * The sandbox actor's state and messages (the pure half; the transition is in
 * `SandboxActor.ts`, the row mapping in `Store.ts`).
 *
 * The state is the `sandboxes` row: the record of docs/contract.md#sandbox-record plus what the
 * control plane needs to run the state machine. Times are ms since the epoch (the record renders
 * them as ISO 8601). `env` is not part of it: it travels sealed in the `Create` message to the host
 * and is never stored in the clear (it may carry credentials, e.g. an injected `sandbox:<id>` key;
 * see `SealedEnv.ts`).
 */
import { OnTimeout, StopReason } from "@svc/domain/Lifecycle"
import { NetworkPolicy } from "@svc/domain/Network"
import { SandboxState, SandboxType, VolumeAttachment } from "@svc/domain/Sandbox"
import { SandboxImage } from "@svc/host-protocol/Images"
import { ActivityReport, AgentReport } from "@svc/host-protocol/Protocol"
import { VolumeMount } from "@svc/host-protocol/Volumes"
import { Schema } from "effect"

const Ms = Schema.Number
const NullableMs = Schema.NullOr(Schema.Number)

export const SandboxActorState = Schema.Struct({
  id: Schema.String,
  orgId: Schema.String,
  name: Schema.String,
  templateId: Schema.String,
  /** The template as the host's driver knows it (`base`). */
  templateName: Schema.String,
  /** Set at placement (in the create transaction); null when no host could take it. */
  hostId: Schema.NullOr(Schema.String),
  parentId: Schema.NullOr(Schema.String),
  state: SandboxState,
  type: SandboxType,
  region: Schema.String,
  datacenter: Schema.NullOr(Schema.String),
  agentReady: Schema.Boolean,
  runtimeReady: Schema.Boolean,
  runtimeReason: Schema.NullOr(Schema.String),
  cpu: Schema.Int,
  ramMb: Schema.Int,
  diskGb: Schema.Int,
  vsockCid: Schema.NullOr(Schema.Int),
  internalIp: Schema.NullOr(Schema.String),
  exposedPorts: Schema.Array(Schema.Int),
  volumeAttachments: Schema.Array(VolumeAttachment),
  metadata: Schema.Record(Schema.String, Schema.Json),
  errorMessage: Schema.NullOr(Schema.String),
  /** The egress policy the hosts' proxies enforce (`egress` KV entry `sandbox.<id>`). */
  network: NetworkPolicy,
  /** Bound secrets, in binding order; a deleted secret is removed from here by its deletion. */
  secretIds: Schema.Array(Schema.String),
  /**
   * Lifetime in seconds once running (`timeout_s`, docs/contract.md#creating-a-sandbox); null:
   * none.
   */
  timeoutS: Schema.NullOr(Schema.Int),
  createdAt: Ms,
  startedAt: NullableMs,
  stoppedAt: NullableMs,
  deletedAt: NullableMs,
  /** When `state` last changed (the timeout sweeper's clock). */
  stateSince: Ms,
  /** Host time (`AgentReport.at`) of the newest report applied: older ones are stale. */
  lastReportAt: NullableMs,
  /** `sandbox.created` was emitted (the first time the host reported it running). */
  createdEmitted: Schema.Boolean,
  // Lifecycle (`Lifecycle.ts`).
  idleTimeoutS: Schema.NullOr(Schema.Int),
  onTimeout: OnTimeout,
  autoDeleteS: Schema.NullOr(Schema.Int),
  autoResume: Schema.Boolean,
  /** Where `timeoutS` counts from: the start, or the last keep-alive (PUT .../timeout). */
  timeoutFrom: NullableMs,
  /** The last activity its host reported, in the runtime's clock (or its start). */
  lastActivityAt: NullableMs,
  /** Its host says something runs in it (an exec, a background process, a terminal): never idle. */
  busy: Schema.Boolean,
  /** Why it last stopped; null while running. */
  stopReason: Schema.NullOr(StopReason)
})
export type SandboxActorState = typeof SandboxActorState.Type

// ---------------------------------------------------------------------------------------------
// Messages

/**
 * Sent by the API in the transaction that inserts the `pending` row (placement already done
 * there: `hostId` set, or `unplaceable` says why not).
 */
export const Create = Schema.TaggedStruct("Create", {
  /** The env sealed for `transit` by the API; the actor passes it on to the host unopened. */
  sealedEnv: Schema.String,
  unplaceable: Schema.NullOr(Schema.String),
  /** A template's image (its layers, start and ready commands); absent for `base`. */
  image: Schema.optionalKey(SandboxImage),
  /** The volumes its host mounts (checked and locked by the API); absent: none. */
  volumes: Schema.optionalKey(Schema.Array(VolumeMount)),
  /** A fork (`Forks.ts`): the source on the same host and the fork request's snapshot id. */
  forkOf: Schema.optionalKey(Schema.Struct({ sandboxId: Schema.String, snapshot: Schema.String }))
})
export const Start = Schema.TaggedStruct("Start", {})
/** `reason`: who stops it (absent: its user; the usage meter says `usage_limit`). */
export const Stop = Schema.TaggedStruct("Stop", { reason: Schema.optionalKey(StopReason) })
/**
 * Delete this sandbox; `children` are its descendants, each deleted by its own actor.
 * `hostLive: false` (host down, or never placed) ends in `deleted` at once: nobody would
 * confirm the destroy (the command is still published, durable, for when the host returns).
 */
const Children = Schema.Array(Schema.Struct({ id: Schema.String, hostLive: Schema.Boolean }))
export const Delete = Schema.TaggedStruct("Delete", {
  hostLive: Schema.Boolean,
  children: Children
})
/** The host's record is older than `HOST_DOWN_AFTER_MS` (or gone): from the runtime's watcher. */
export const HostDown = Schema.TaggedStruct("HostDown", {
  hostId: Schema.String,
  /** ms since the epoch of its last heartbeat; null when its record is gone. */
  lastSeenAt: NullableMs
})
/** The sandbox sat in a transitional `state` since `since` for longer than `afterMs`. */
export const Timeout = Schema.TaggedStruct("Timeout", {
  state: SandboxState,
  since: Ms,
  afterMs: Ms
})
/**
 * A running sandbox reached its `timeout_s` lifetime, counted from `startedAt` (its `timeoutFrom`
 * as the supervisor saw it): stop it, or delete it (and `children`) with `on_timeout: delete`.
 */
export const Expire = Schema.TaggedStruct("Expire", { startedAt: Ms, children: Schema.optionalKey(Children) })
/** A running sandbox was idle `idle_timeout_s` since `lastActivityAt` (as the supervisor saw it). */
export const Idle = Schema.TaggedStruct("Idle", { lastActivityAt: Ms, children: Children })
/** A sandbox stopped at `stoppedAt` was kept `auto_delete_s`: delete it and `children`. */
export const AutoDelete = Schema.TaggedStruct("AutoDelete", { stoppedAt: Ms, children: Children })
/**
 * PUT /v1/sandboxes/{id}/timeout: a field absent is kept; `timeoutS` counts again from now
 * (a keep-alive), as does the idle clock when `idleTimeoutS` is given.
 */
export const SetTimeout = Schema.TaggedStruct("SetTimeout", {
  timeoutS: Schema.optionalKey(Schema.NullOr(Schema.Int)),
  idleTimeoutS: Schema.optionalKey(Schema.NullOr(Schema.Int))
})

/** A new egress policy (PUT /v1/sandboxes/{id}/network): stored and published to the hosts. */
export const SetNetwork = Schema.TaggedStruct("SetNetwork", { network: NetworkPolicy })
/** Bind a secret (POST /v1/sandboxes/{id}/secrets); the API checked it is a live secret of the org. */
export const BindSecret = Schema.TaggedStruct("BindSecret", { secretId: Schema.String })

export const SandboxMessage = Schema.Union([
  Create,
  Start,
  Stop,
  Delete,
  AgentReport,
  HostDown,
  Timeout,
  Expire,
  SetNetwork,
  BindSecret,
  Idle,
  AutoDelete,
  SetTimeout,
  ActivityReport
])
export type SandboxMessage = typeof SandboxMessage.Type
