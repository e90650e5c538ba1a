/**
 * Sandboxes (docs/contract.md#sandboxes): the record, the create request, exec.
 *
 * The record keeps the exact field names of docs/contract.md#sandbox-record, mixed case included;
 * the field this contract adds, the parent, is `parentId` like the record's other id references
 * (orgId, templateId, hostId). `env` is never part of the record (it may carry credentials, e.g. an
 * injected `sandbox:<id>` key). Unset values are `null`.
 */
import { Effect, Schema, SchemaTransformation } from "effect"
import { AttachmentId, HostId, OrgId, SandboxId, SecretId, TemplateId, VolumeId } from "./Ids.ts"
import { LifecycleSeconds, OnTimeout, StopReason } from "./Lifecycle.ts"
import { NetworkPolicy, Rules } from "./Network.ts"
import { ListQuery, Page } from "./Pagination.ts"
import {
  AbsolutePath,
  Bounded,
  enforcedMax,
  EnvVars,
  jsonBytes,
  MAX_ERROR_TEXT,
  MAX_JSON_DEPTH,
  MAX_RECORD_NAME,
  Name,
  RelativePath,
  Truncated
} from "./Text.ts"
import { NullableTimestamp, Timestamp } from "./Time.ts"

export const SANDBOX_STATES = [
  "pending",
  "starting",
  "running",
  "stopping",
  "stopped",
  "deleting",
  "deleted",
  "error"
] as const
export const SandboxState = Schema.Literals(SANDBOX_STATES)
export type SandboxState = typeof SandboxState.Type

/** `persistent` (the default) keeps its disk when stopped; `ephemeral` is removed once it stops. */
export const SandboxType = Schema.Literals(["persistent", "ephemeral"])
export type SandboxType = typeof SandboxType.Type

export const VolumeMode = Schema.Literals(["rw", "ro"])
export type VolumeMode = typeof VolumeMode.Type

/**
 * One entry of a sandbox's `volume_attachments` (docs/contract.md#volumes). Added by this
 * contract: `attachment_id` (the volume record's `attachment_id`) and `device_path` (the loop
 * device its host mounted the volume's image from while the sandbox runs; null otherwise).
 */
export const VolumeAttachment = Schema.Struct({
  volume_id: VolumeId,
  type: Bounded(32),
  driver: Bounded(64),
  mount_path: Bounded(4096),
  subpath: Bounded(4096),
  mode: VolumeMode,
  attachment_id: AttachmentId,
  device_path: Schema.NullOr(Bounded(256))
})
export type VolumeAttachment = typeof VolumeAttachment.Type

export const MAX_METADATA_BYTES = 16 * 1024

/**
 * The first problem of a metadata value that Postgres' jsonb or the size check would trip on:
 * nesting deeper than `MAX_JSON_DEPTH` or a NUL in a key or a string (walked without
 * recursion, so no depth can overflow the stack here).
 */
const metadataProblem = (value: unknown): Schema.FilterIssue | undefined => {
  const stack: Array<{ readonly value: unknown; readonly depth: number; readonly path: ReadonlyArray<PropertyKey> }> = [
    { value, depth: 1, path: [] }
  ]
  while (stack.length > 0) {
    const { value: v, depth, path } = stack.pop()!
    if (typeof v === "string") {
      if (v.includes("\u0000")) return { path, issue: "strings cannot contain NUL" }
    } else if (v !== null && typeof v === "object") {
      if (depth > MAX_JSON_DEPTH) return { path, issue: `nested at most ${MAX_JSON_DEPTH} levels deep` }
      for (const [k, child] of Object.entries(v)) {
        const at = [...path, Array.isArray(v) ? Number(k) : k]
        if (k.includes("\u0000")) return { path: at, issue: "keys cannot contain NUL" }
        stack.push({ value: child, depth: depth + 1, path: at })
      }
    }
  }
  return undefined
}

/** Free-form JSON object, at most 16 KiB serialized, without NUL, at most 32 levels deep. */
export const Metadata = Schema.Record(Schema.String, Schema.Json).check(
  Schema.makeFilter(
    (m: object) => metadataProblem(m) ?? (jsonBytes(m) <= MAX_METADATA_BYTES || "at most 16 KiB of JSON"),
    {
      expected: "a JSON object of at most 16 KiB"
    }
  )
)
export type Metadata = typeof Metadata.Type

// Limits of a create request. Bounds of docs/contract.md#creating-a-sandbox, chosen to be generous
// but finite.
export const CPU_MIN = 1
export const CPU_MAX = 16
export const RAM_MB_MIN = 64
export const RAM_MB_MAX = 65_536
export const DISK_GB_MIN = 1
export const DISK_GB_MAX = 1024
export const MAX_EXPOSED_PORTS = 16
export const MAX_VOLUMES = 16
export const MAX_SECRETS = 32
export const TIMEOUT_S_MAX = 30 * 24 * 3600

/** A sandbox as returned by the API. */
export const Sandbox = Schema.Struct({
  id: SandboxId,
  name: Bounded(MAX_RECORD_NAME),
  orgId: OrgId,
  templateId: TemplateId,
  /** null until placed on a host. */
  hostId: Schema.NullOr(HostId),
  parentId: Schema.NullOr(SandboxId),
  state: SandboxState,
  type: SandboxType,
  region: Bounded(128),
  datacenter: Schema.NullOr(Bounded(128)),
  agent_ready: Schema.Boolean,
  runtime_ready: Schema.Boolean,
  runtime_reason: Schema.NullOr(Truncated(1024)),
  cpu: Schema.Int,
  ramMb: Schema.Int,
  diskGb: Schema.Int,
  vsockCid: Schema.NullOr(Schema.Int),
  internalIp: Schema.NullOr(Bounded(64)),
  exposedPorts: Schema.Array(Schema.Int).check(Schema.isMaxLength(MAX_EXPOSED_PORTS)),
  volume_attachments: Schema.Array(VolumeAttachment).check(Schema.isMaxLength(MAX_VOLUMES)),
  metadata: Schema.Record(Schema.String, Schema.Json),
  errorMessage: Schema.NullOr(Truncated(MAX_ERROR_TEXT)),
  /** The egress policy (docs/contract.md#snapshots-network-policy-and-exposed-ports): `{allow_out, deny_out}`. */
  network: NetworkPolicy,
  /** The ids of the secrets bound to it, in binding order (never their values). */
  secrets: Schema.Array(SecretId).check(Schema.isMaxLength(MAX_SECRETS)),
  createdAt: Timestamp,
  startedAt: NullableTimestamp,
  stoppedAt: NullableTimestamp,
  deletedAt: NullableTimestamp,
  // Lifecycle (docs/contract.md#lifecycle-timeouts-idleness-resume): the create's fields shown
  // back under their own names, and what the platform derives from them.
  timeout_s: Schema.NullOr(Schema.Int),
  idle_timeout_s: Schema.NullOr(Schema.Int),
  on_timeout: OnTimeout,
  auto_delete_s: Schema.NullOr(Schema.Int),
  auto_resume: Schema.Boolean,
  /** When `timeout_s` stops it, while it runs; null without `timeout_s` or when not running. */
  expiresAt: NullableTimestamp,
  /** The last activity its host saw (or its start); null before it first ran. */
  lastActivityAt: NullableTimestamp,
  /** Why it last stopped; null while running (and before it first stopped). */
  stop_reason: Schema.NullOr(StopReason)
})
export type Sandbox = typeof Sandbox.Type

const intBetween = (min: number, max: number) => Schema.Int.check(Schema.isBetween({ minimum: min, maximum: max }))
const withDefault = <S extends Schema.Top>(value: S["Encoded"]) => (schema: S) =>
  schema.pipe(Schema.withDecodingDefaultKey(Effect.succeed(value)))

const uniqueBy = <A>(label: string, key: (a: A) => unknown) =>
  Schema.makeFilter((items: ReadonlyArray<A>) => {
    const seen = new Set<unknown>()
    for (let i = 0; i < items.length; i++) {
      const k = key(items[i]!)
      if (seen.has(k)) return { path: [i], issue: `duplicate ${label}` }
      seen.add(k)
    }
    return true
  })

export const SandboxVolumeRequest = Schema.Struct({
  volume_id: VolumeId,
  /** Where it appears in the sandbox; not `/` itself. */
  mount_path: AbsolutePath.check(Schema.makeFilter((p: string) => p !== "/" || "cannot mount over /")),
  subpath: RelativePath.pipe(withDefault("")),
  mode: VolumeMode.pipe(withDefault("rw"))
})
export type SandboxVolumeRequest = typeof SandboxVolumeRequest.Type

/**
 * Whether a path names /proc, /sys or something under them once `.` segments, repeated and
 * trailing slashes are dropped (`..` is refused by `AbsolutePath` before this). Their files
 * hold every process's environ (the injected key among them): exec reads them, the files
 * routes never do. Links inside the sandbox are checked where the path is resolved (the host's
 * file scripts, `packages/host/src/Driver/Files.ts`).
 */
export const isKernelInterfacePath = (path: string): boolean => {
  const first = path.split("/").find((segment) => segment !== "" && segment !== ".")
  return first === "proc" || first === "sys"
}

/** The `path` of every files route: absolute, and never under /proc or /sys (400). */
export const SandboxFilePath = AbsolutePath.check(
  Schema.makeFilter((p: string) => !isKernelInterfacePath(p) || "paths under /proc and /sys are refused", {
    expected: "a path outside /proc and /sys"
  })
)

export const Port = intBetween(1, 65_535)

/**
 * `network` of a create and the body of PUT /v1/sandboxes/{id}/network: rules are CIDRs,
 * addresses or domains (`*.` in front for subdomains), at most 100 per list; an omitted list is
 * empty (a PUT replaces the whole policy).
 */
export const NetworkPolicyRequest = Schema.Struct({
  allow_out: Rules.pipe(withDefault([])),
  deny_out: Rules.pipe(withDefault([]))
})
export type NetworkPolicyRequest = typeof NetworkPolicyRequest.Type

/** Body of POST /v1/sandboxes/{id}/secrets. */
export const BindSecretRequest = Schema.Struct({ secret_id: SecretId })
export type BindSecretRequest = typeof BindSecretRequest.Type

/** Body of POST /v1/sandboxes (snake_case, defaults applied when decoding). */
export const CreateSandboxRequest = Schema.Struct({
  name: Schema.optionalKey(Name(120)),
  /** A template id or name. */
  template: Name(120).pipe(withDefault("base")),
  parent_id: Schema.NullOr(SandboxId).pipe(withDefault(null)),
  env: EnvVars.pipe(withDefault({})),
  cpu: intBetween(CPU_MIN, CPU_MAX).pipe(withDefault(1)),
  ram_mb: intBetween(RAM_MB_MIN, RAM_MB_MAX).pipe(withDefault(512)),
  disk_gb: intBetween(DISK_GB_MIN, DISK_GB_MAX).pipe(withDefault(1)),
  metadata: Metadata.pipe(withDefault({})),
  type: SandboxType.pipe(withDefault("persistent")),
  /** null: any region. */
  region: Schema.NullOr(Schema.String.check(enforcedMax(64), Schema.isPattern(/^[A-Za-z0-9._-]{1,64}$/)))
    .pipe(withDefault(null)),
  volumes: Schema.Array(SandboxVolumeRequest).check(
    Schema.isMaxLength(MAX_VOLUMES),
    uniqueBy<SandboxVolumeRequest>("mount_path", (v) => v.mount_path.replace(/\/+$/, ""))
  ).pipe(withDefault([])),
  exposed_ports: Schema.Array(Port).check(Schema.isMaxLength(MAX_EXPOSED_PORTS), uniqueBy<number>("port", (p) => p))
    .pipe(withDefault([])),
  secrets: Schema.Array(SecretId).check(Schema.isMaxLength(MAX_SECRETS), uniqueBy<string>("secret", (s) => s))
    .pipe(withDefault([])),
  network: NetworkPolicyRequest.pipe(withDefault({})),
  /** Seconds until the platform stops it; null: no limit. */
  timeout_s: Schema.NullOr(intBetween(1, TIMEOUT_S_MAX)).pipe(withDefault(null)),
  /** Seconds without activity until the platform stops it; null: never. */
  idle_timeout_s: Schema.NullOr(LifecycleSeconds).pipe(withDefault(null)),
  on_timeout: OnTimeout.pipe(withDefault("stop")),
  /** Seconds a stopped sandbox is kept before it is deleted; null: for ever. */
  auto_delete_s: Schema.NullOr(LifecycleSeconds).pipe(withDefault(null)),
  /** A call on it when stopped starts it (instead of 409). */
  auto_resume: Schema.Boolean.pipe(withDefault(false))
})
export type CreateSandboxRequest = typeof CreateSandboxRequest.Type

export const EXEC_TIMEOUT_MS_MAX = 600_000
export const EXEC_TIMEOUT_MS_DEFAULT = 60_000
export const EXEC_MAX_ARGS = 4096
/** Linux's own limit on one argument (MAX_ARG_STRLEN, 128 KiB). */
export const EXEC_MAX_ARG_LENGTH = 128 * 1024

/** Body of POST /v1/sandboxes/{id}/exec. */
export const ExecRequest = Schema.Struct({
  /** argv: at least one element, the first non-empty; no NUL anywhere. */
  cmd: Schema.Array(Bounded(EXEC_MAX_ARG_LENGTH)).check(
    enforcedMax(EXEC_MAX_ARGS),
    Schema.makeFilter((cmd: ReadonlyArray<string>) => {
      if (cmd.length === 0) return "at least the program to run"
      if (cmd.length > EXEC_MAX_ARGS) return `at most ${EXEC_MAX_ARGS} arguments`
      if (cmd[0]!.length === 0) return { path: [0], issue: "the program cannot be empty" }
      const i = cmd.findIndex((a) => a.includes("\u0000"))
      return i < 0 || { path: [i], issue: "arguments cannot contain NUL" }
    }, { expected: "a non-empty argv array" })
  ),
  cwd: Schema.optionalKey(AbsolutePath),
  env: Schema.optionalKey(EnvVars),
  /** Within the 1 MiB body limit. */
  stdin: Schema.optionalKey(Bounded(1024 * 1024)),
  timeout_ms: intBetween(1, EXEC_TIMEOUT_MS_MAX).pipe(withDefault(EXEC_TIMEOUT_MS_DEFAULT))
})
export type ExecRequest = typeof ExecRequest.Type

/** What the host keeps of each of an exec's stdout and stderr (bytes; never fewer UTF-16 units). */
export const EXEC_OUTPUT_MAX = 1024 * 1024

export const ExecResult = Schema.Struct({
  exit_code: Schema.Int,
  stdout: Truncated(EXEC_OUTPUT_MAX),
  stderr: Truncated(EXEC_OUTPUT_MAX),
  duration_ms: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  /** stdout or stderr was longer than the host keeps (1 MiB each) and was cut there. */
  truncated: Schema.Boolean
})
export type ExecResult = typeof ExecResult.Type

/**
 * GET /v1/sandboxes/{id}/stats: a running sandbox's usage now, read from its host. The network
 * counters are its link's, since this run began (a stop or a restart starts them again); null
 * where the host cannot tell.
 */
export const SandboxStats = Schema.Struct({
  cpu_usage_ns: Schema.NullOr(Schema.Int),
  memory_bytes: Schema.Int,
  pids: Schema.Int,
  net_bytes_in: Schema.NullOr(Schema.Int),
  net_bytes_out: Schema.NullOr(Schema.Int)
})
export type SandboxStats = typeof SandboxStats.Type

/** `paginated=false` returns every row in one response, capped at this many. */
export const UNPAGINATED_CAP = 10_000

/**
 * ... and at about this many bytes of JSON (rows carry up to 16 KiB of metadata each: 10,000 of
 * them would be 160 MiB). The response stops before the row that would cross it, with `limit`
 * the rows returned and `has_more` true, like the row cap: the client asks again from
 * `offset + limit`. Always at least one row, so paging through always advances.
 */
export const UNPAGINATED_MAX_BYTES = 8 * 1024 * 1024

/** `state`: one state or a comma-separated list of them (duplicates removed). */
export const StateFilter = Schema.String.check(Schema.isMaxLength(256)).pipe(
  Schema.decodeTo(
    Schema.Array(SandboxState).check(Schema.isMinLength(1)),
    // Each piece is then checked against SandboxState by the target schema.
    SchemaTransformation.transform<ReadonlyArray<SandboxState>, string>({
      decode: (s) => [...new Set(s.split(","))] as ReadonlyArray<SandboxState>,
      encode: (states) => states.join(",")
    })
  )
)

/** Query of GET /v1/sandboxes. */
export const ListSandboxesQuery = Schema.Struct({
  ...ListQuery.fields,
  paginated: Schema.Literals(["true", "false"]).pipe(
    Schema.decodeTo(
      Schema.Boolean,
      SchemaTransformation.transform({ decode: (s) => s === "true", encode: (b) => (b ? "true" : "false") })
    ),
    Schema.withDecodingDefaultKey(Effect.succeed("true" as const))
  ),
  state: Schema.optionalKey(StateFilter)
})
export type ListSandboxesQuery = typeof ListSandboxesQuery.Type

/** Response of GET /v1/sandboxes. */
export const SandboxPage = Page("rows", Sandbox, UNPAGINATED_CAP)
export type SandboxPage = typeof SandboxPage.Type
