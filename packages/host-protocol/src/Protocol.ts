/**
 * The wire between the control plane (sandbox actor, scheduler, API) and the host agents.
 *
 * Control → agent, durable: commands on the `AGENT` stream, subject `agent.<hostId>.<command>`
 * (`create`, `start`, `stop`, `destroy`, published through the outbox by the sandbox actor's
 * transitions; `build`, a template's image, `Images.ts`), consumed by that host's agent with a
 * durable consumer of its own. Commands are idempotent on the agent (a redelivered `create` of an
 * existing sandbox reports its state).
 *
 * Agent → control, durable: every state change of a sandbox is an `AgentReport` sent to the
 * sandbox actor's mailbox on the subject naming its host (`reportSubject`:
 * `actor.sandbox.<partition>.<sandboxId>.host.<hostId>`). Each agent's NATS user may publish only
 * its own host's report subjects (`Permissions.ts`), and the sandbox actor takes the host from
 * the subject, never from the report's `hostId`.
 *
 * Hosts: each agent keeps a `HostRecord` under its host id in the `hosts` KV bucket,
 * refreshed every `HOST_HEARTBEAT_MS`; a host whose record is older than `HOST_DOWN_AFTER_MS`
 * is down (the runtime then moves its sandboxes to `error`).
 *
 * Data plane, synchronous: exec and files go from the API process straight to the agent over
 * HTTP (`HostRecord.endpoint`, bearer `HostRecord.token`): its routes, schemas and errors are
 * declared in `DataPlane.ts`.
 */
import { type MailboxAddress, mailboxTokens, type Sender } from "@svc/bus/Mailbox"
import type { BucketSpec, StreamSpec } from "@svc/bus/Topology"
import { idString } from "@svc/domain/Ids"
import { Schema } from "effect"
import { BuildCommand, SandboxImage } from "./Images.ts"
import { VolumeMount } from "./Volumes.ts"

export const HOST_HEARTBEAT_MS = 2_000
export const HOST_DOWN_AFTER_MS = 10_000

export const SANDBOX_ACTOR_TYPE = "sandbox"
export const SANDBOX_ACTOR_PARTITIONS = 16
/** Where an agent's reports go: the sandbox actors' mailboxes (`actor.sandbox.<partition>.<id>`). */
export const SANDBOX_MAILBOX: MailboxAddress = { type: SANDBOX_ACTOR_TYPE, partitions: SANDBOX_ACTOR_PARTITIONS }
/** The sender a host's reports name in their subject (`Mailbox.ts`): `.host.<hostId>`. */
export const REPORT_SENDER_KIND = "host"
export const reportSender = (hostId: string): Sender => ({ kind: REPORT_SENDER_KIND, id: hostId })
/** A report's subject (relative to the NATS prefix): `actor.sandbox.<partition>.<sandboxId>.host.<hostId>`. */
export const reportSubject = (sandboxId: string, hostId: string) =>
  mailboxTokens(SANDBOX_MAILBOX, sandboxId, reportSender(hostId)).join(".")
/** Every report subject of one host: what its agent's NATS user may publish to the sandbox actors. */
export const hostReportSubjects = (hostId: string) => `actor.${SANDBOX_ACTOR_TYPE}.*.*.${REPORT_SENDER_KIND}.${hostId}`

/** The stream and subjects of agent commands (relative to the NATS prefix). */
export const AGENT_STREAM = "AGENT"
export const agentSubject = (hostId: string, command: AgentCommand["_tag"]) => ["agent", hostId, command] as const
export const agentConsumer = (hostId: string) => `agent_${hostId}`

/**
 * The AGENT stream's one configuration, which both sides `ensureStream` (the relay cannot
 * publish a command before the stream exists, and some settings, like retention, cannot be
 * changed once created). Workqueue: a command is gone once its host acked it; the hosts'
 * consumers filter disjoint subjects (`agent.<hostId>.>`), as workqueue streams require.
 */
export const AGENT_STREAM_SPEC: StreamSpec = {
  name: AGENT_STREAM,
  subjects: ["agent.>"],
  retention: "workqueue",
  maxAgeMs: 7 * 24 * 3600_000,
  duplicateWindowMs: 10 * 60_000
}

export const HOSTS_BUCKET = "hosts"
/** The `hosts` bucket's configuration (both sides `ensureBucket` it). */
export const HOSTS_BUCKET_SPEC: BucketSpec = { name: HOSTS_BUCKET, history: 1 }

export const Capacity = Schema.Struct({
  cpu: Schema.Int,
  ramMb: Schema.Int,
  diskGb: Schema.Int
})
export type Capacity = typeof Capacity.Type

/** Which limits this host enforces: `enforced`, or why not (`unavailable: ...`). */
export const HostLimits = Schema.Struct({
  /** The cgroup version found at start (`none`: no cgroup file system). */
  cgroup: Schema.Literals(["v1", "v2", "none"]),
  memory: Schema.String,
  cpu: Schema.String,
  pids: Schema.String,
  /** Disk images (`diskGb`); absent in the records of agents from before them. */
  disk: Schema.optionalKey(Schema.String)
})
export type HostLimits = typeof HostLimits.Type

export const HostRecord = Schema.Struct({
  /** As the agent's settings take it (`host_<26 base32>`): a record naming another form is not read. */
  hostId: idString("host"),
  region: Schema.String,
  datacenter: Schema.String,
  version: Schema.String,
  capacity: Capacity,
  /** Data-plane base URL of the agent, e.g. `http://127.0.0.1:43127`. */
  endpoint: Schema.String,
  /** Bearer token for the data plane; random per agent start. */
  token: Schema.String,
  /** ms since the epoch of the last heartbeat. */
  heartbeatAt: Schema.Number,
  startedAt: Schema.Number,
  /**
   * Which sandbox limits hold on this host (`enforced`, or why not) and its cgroup version. An
   * agent refuses to start without all of them unless its operator allows it.
   */
  limits: Schema.optionalKey(HostLimits),
  /** `capacity.cpu` is the host's cores times this: cpu is a cap per sandbox, not a reservation. */
  cpuOvercommit: Schema.optionalKey(Schema.Number),
  /**
   * The image layers extracted on this host (`Images.ts`) and the roots made here besides `base`:
   * the scheduler prefers a host that holds a template's image already.
   */
  layers: Schema.optionalKey(Schema.Array(Schema.String)),
  roots: Schema.optionalKey(Schema.Array(Schema.String)),
  /** Ready warm pool sandboxes by template id (`Pools.ts`): the scheduler sends a template's creates there. */
  pools: Schema.optionalKey(Schema.Record(Schema.String, Schema.Int))
})
export type HostRecord = typeof HostRecord.Type

export const SandboxResources = Schema.Struct({
  template: Schema.String,
  /**
   * The sandbox's env, sealed by the API for `transit` (`SealedEnv.ts`): JetStream and the
   * outbox only ever hold it sealed. The agent opens it with `SVC_ENCRYPTION_KEYS`.
   */
  sealedEnv: Schema.String,
  cpu: Schema.Int,
  ramMb: Schema.Int,
  diskGb: Schema.Int,
  exposedPorts: Schema.Array(Schema.Int),
  /** A template's image: its layers over the root `template` names, its start and ready commands (`Images.ts`). */
  image: Schema.optionalKey(SandboxImage),
  /** The sandbox's volumes (`Volumes.ts`); absent: none. */
  volumes: Schema.optionalKey(Schema.Array(VolumeMount)),
  /** The template's id, for a template's sandbox: which warm pool may serve it (`Pools.ts`). */
  templateId: Schema.optionalKey(Schema.String),
  /**
   * A fork: its file system starts as a copy of `sandboxId`'s writable layer (on this host), taken
   * once per `snapshot` (one fork request) and shared by its forks as a lower layer; its env is
   * the source's. `sealedEnv` is then ignored.
   */
  forkOf: Schema.optionalKey(Schema.Struct({ sandboxId: Schema.String, snapshot: Schema.String }))
})
export type SandboxResources = typeof SandboxResources.Type

export const CreateCommand = Schema.TaggedStruct("create", {
  sandboxId: Schema.String,
  orgId: Schema.String,
  resources: SandboxResources
})
export const StartCommand = Schema.TaggedStruct("start", { sandboxId: Schema.String, orgId: Schema.String })
export const StopCommand = Schema.TaggedStruct("stop", { sandboxId: Schema.String, orgId: Schema.String })
export const DestroyCommand = Schema.TaggedStruct("destroy", { sandboxId: Schema.String, orgId: Schema.String })

export const AgentCommand = Schema.Union([CreateCommand, StartCommand, StopCommand, DestroyCommand, BuildCommand])
export type AgentCommand = typeof AgentCommand.Type

/**
 * What a host says about one sandbox. `status`:
 * - `running`: processes up and exec works (`agentReady` true), with `internalIp`, `via`
 *   (`cold-boot` for a fresh file system, `restore` for a saved one) and `startedAt`;
 * - `stopped`: processes ended, file system kept;
 * - `destroyed`: nothing left on the host;
 * - `failed`: the command could not be carried out (`errorMessage`);
 * - `exited`: no command asked for it: the sandbox's init died (out of memory, killed, crashed)
 *   and what was left of it was ended; the file system is kept, `errorMessage` says why
 *   (`out of memory at ram_mb 256`, `killed by signal 9`, `exited with code 3`).
 */
export const AgentReport = Schema.TaggedStruct("AgentReport", {
  sandboxId: Schema.String,
  /** The reporting host, for logs: the sandbox actor believes the subject's host (`reportSubject`), not this. */
  hostId: Schema.String,
  status: Schema.Literals(["running", "stopped", "destroyed", "failed", "exited"]),
  internalIp: Schema.optionalKey(Schema.NullOr(Schema.String)),
  via: Schema.optionalKey(Schema.Literals(["cold-boot", "restore"])),
  agentReady: Schema.optionalKey(Schema.Boolean),
  errorMessage: Schema.optionalKey(Schema.String),
  /** The template's `ready_cmd` passed (`runtime_ready`), or why not (`runtime_reason`). */
  runtimeReady: Schema.optionalKey(Schema.Boolean),
  runtimeReason: Schema.optionalKey(Schema.NullOr(Schema.String)),
  /** With `running`: the loop device each of its volumes is mounted from, by volume id. */
  volumeDevices: Schema.optionalKey(Schema.Record(Schema.String, Schema.String)),
  /** ms since the epoch, on the host. */
  at: Schema.Number,
  /** With `exited`: the memory cgroup's OOM killer ended its init. */
  outOfMemory: Schema.optionalKey(Schema.Boolean)
})
export type AgentReport = typeof AgentReport.Type

/**
 * How often at most an agent reports a sandbox's activity (and how late a report may be): the
 * supervisor gives an idle sandbox this much more than its `idle_timeout_s`, twice, so that
 * activity not reported yet never stops it early.
 */
export const ACTIVITY_REPORT_MS = 1_000

/**
 * What a host saw of a sandbox's activity (sent to its actor on the same subject as its
 * `AgentReport`s, on a change only): `busy` while something runs in it (an exec, a background
 * process started through the API, a terminal, a preview connection, a transfer), and how long
 * ago its last activity ended, measured on the host's monotonic clock (`idleMs`; a jump of the
 * wall clock changes nothing). The actor turns it into `lastActivityAt` with its own clock.
 */
export const ActivityReport = Schema.TaggedStruct("ActivityReport", {
  sandboxId: Schema.String,
  /** For logs: the actor believes the subject's host. */
  hostId: Schema.String,
  busy: Schema.Boolean,
  idleMs: Schema.Number.check(Schema.isGreaterThanOrEqualTo(0))
})
export type ActivityReport = typeof ActivityReport.Type
