/**
 * The data plane, declared once: exec and files of a sandbox go from an API process straight to
 * the agent of the sandbox's host over HTTP, not over NATS (outputs and uploads of up to 100 MiB
 * exceed NATS payloads). The agent serves this definition (`@svc/host/DataPlaneServer`) and the API
 * calls it through a client derived from it (`@svc/hosts/AgentClient`): a change of
 * a route, a schema or an error here fails to typecheck on whichever side no longer matches.
 *
 *   POST {endpoint}/sandboxes/{id}/exec            body `AgentExecRequest` (JSON) → `AgentExecResult`
 *   GET  {endpoint}/sandboxes/{id}/files?path=     → bytes (`application/octet-stream`) or,
 *                                                    for a folder, `{entries: [...]}` (JSON)
 *   PUT  {endpoint}/sandboxes/{id}/files?path=&mode=&parents=   raw bytes → 204
 *   GET  {endpoint}/sandboxes/{id}/files/archive?path=&format=tar|tar.gz   → the folder as a tar
 *   PUT  {endpoint}/sandboxes/{id}/files/archive?path=&format=   a tar (or tar.gz) → 204
 *   GET  {endpoint}/sandboxes/{id}/files/watch?path=&recursive=   → server-sent events
 *   GET  {endpoint}/sandboxes/{id}/ports/{port}/tunnel   `Upgrade: svc-tunnel` → 101 once the agent
 *                                                    is connected to that exposed port, then raw
 *                                                    bytes both ways (preview tunnels)
 *   POST {endpoint}/sandboxes/{id}/exec/stream     body `AgentExecRequest` → server-sent events
 *                                                    (`AgentProcessEvent`) as the command runs
 *   POST/GET {endpoint}/sandboxes/{id}/processes[/{pid}[/output|/stdin|/signal]]  background
 *                                                    processes (`AgentProcess`, events as above)
 *   GET  {endpoint}/sandboxes/{id}/pty?cols=&rows=  `Upgrade: svc-pty` → 101 once the terminal
 *                                                    runs, then `PtyFrames` both ways
 *   GET/PUT .../files with `Connection: Upgrade`, `Upgrade: svc-splice` (`SPLICE_PROTOCOL`)
 *                                                    the same transfer with its bytes spliced by
 *                                                    the host's kernel, past the agent's event loop
 *   GET  {endpoint}/sandboxes/{id}/files/stat?path=, POST .../files/mkdir|move|remove (JSON)
 *                                                    an entry's stat, folders made, entries
 *                                                    moved and removed (`AgentFilesApi`)
 *
 * `endpoint` and the bearer token are the agent's `HostRecord.endpoint` and `.token`, found only
 * in the `hosts` KV that platform processes read; the token is random per agent start. Files
 * stream both ways (never held whole); each host runs a bounded number of transfers at once.
 * The body of every error is `{error, reason, errno?}` with one class per `reason` below; its
 * status says the same. The agent takes any `Content-Type`: an exec body is read as JSON, an
 * upload as raw bytes.
 */
import { type Cause, Schema } from "effect"
import {
  HttpApi,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSchema,
  HttpApiSecurity
} from "effect/http-api"

/** An exec body above this is 413 `too_large` (a declared `Content-Length` before reading). */
export const MAX_EXEC_BODY_BYTES = 1024 * 1024
/**
 * The host's own bound of one upload's body (a file or an archive): none that a disk could
 * reach. Uploads stream to the sandbox's disk, which bounds them (507 `insufficient_storage`).
 */
export const MAX_UPLOAD_BYTES = Number.MAX_SAFE_INTEGER

/**
 * A file transfer whose bytes the host's kernel moves between the connection and the sandbox
 * (splice), never through the agent's event loop: `readFile` or `writeFile` asked with
 * `Connection: Upgrade`, `Upgrade: svc-splice` and no body. Refusals are answered as on the
 * plain route (and a `readFile` of a folder, a small file or one of unknown size is answered
 * plainly, 200); otherwise `101 Switching Protocols`, then on the connection:
 *   readFile:  exactly `x-svc-size` (`SPLICE_SIZE_HEADER`) bytes, then the agent ends it; a read
 *              that fails resets the connection (fewer bytes: never a whole file).
 *   writeFile: the caller sends the body and ends its side (a reset: the body was cut); the agent
 *              answers one `AgentSpliceResult` line of JSON and ends.
 */
export const SPLICE_PROTOCOL = "svc-splice"
export const SPLICE_SIZE_HEADER = "x-svc-size"
/** A file this small is answered plainly (a splice costs a fork and a round trip). */
export const SPLICE_MIN_BYTES = 1024 * 1024

/** A spliced upload's outcome: 204, or the status and `{error, reason, errno?}` body of the plain route's refusal. */
export const AgentSpliceResult = Schema.Struct({
  status: Schema.Int,
  body: Schema.optionalKey(Schema.Unknown)
})
export type AgentSpliceResult = typeof AgentSpliceResult.Type

export const AgentExecRequest = Schema.Struct({
  cmd: Schema.Array(Schema.String),
  cwd: Schema.optionalKey(Schema.String),
  env: Schema.optionalKey(Schema.Record(Schema.String, Schema.String)),
  /** UTF-8 text; binary stdin is not part of the /v1 contract. */
  stdin: Schema.optionalKey(Schema.String),
  timeout_ms: Schema.optionalKey(Schema.Int)
})
export type AgentExecRequest = typeof AgentExecRequest.Type

/** The /v1 exec result, as the agent computes it (outputs decoded as UTF-8, capped). */
export const AgentExecResult = Schema.Struct({
  exit_code: Schema.Int,
  stdout: Schema.String,
  stderr: Schema.String,
  duration_ms: Schema.Number,
  /** stdout or stderr went past the host's cap and was cut (absent from older agents). */
  truncated: Schema.optionalKey(Schema.Boolean)
})
export type AgentExecResult = typeof AgentExecResult.Type

/** A running sandbox's usage now: its cgroups and its network link's counters since this run began. */
export const AgentSandboxStats = Schema.Struct({
  cpu_usage_ns: Schema.NullOr(Schema.Int),
  memory_bytes: Schema.Int,
  pids: Schema.Int,
  net_bytes_in: Schema.NullOr(Schema.Int),
  net_bytes_out: Schema.NullOr(Schema.Int)
})
export type AgentSandboxStats = typeof AgentSandboxStats.Type

export const AgentFileEntry = Schema.Struct({
  name: Schema.String,
  type: Schema.Literals(["file", "dir", "symlink", "other"]),
  size: Schema.Int,
  mtime: Schema.String
})

/** GET .../files on a folder. */
export const AgentFileListing = Schema.Struct({ entries: Schema.Array(AgentFileEntry) })
export type AgentFileListing = typeof AgentFileListing.Type

/**
 * One error class per `reason`. The body is exactly `{error, reason, errno?}` (no `_tag` on the
 * wire: `reason` tells them apart, as the status does); `_tag` exists on the prototype for
 * `Effect.catchTag`, `message` mirrors `error` for logs.
 */
const AgentErrorClass =
  <Self>() =>
  <const Tag extends string, const Reason extends string, const Fields extends Schema.Struct.Fields = {}>(
    tag: Tag,
    options: { readonly reason: Reason; readonly status: number; readonly fields?: Fields }
  ) => {
    const fields = { error: Schema.String, reason: Schema.tag(options.reason), ...(options.fields ?? ({} as Fields)) }
    const Base: Function = Schema.Error<Self>(tag)(fields, { httpApiStatus: options.status }) as Function
    Object.defineProperty(Base.prototype, "_tag", { get: () => tag, configurable: true })
    Object.defineProperty(Base.prototype, "message", {
      get(this: { readonly error: string }) {
        return this.error
      },
      configurable: true
    })
    Object.assign(Base, { status: options.status })
    // The cast resolves Schema.Error's `[Self] extends [never]` guard for a generic `Self`.
    return Base as unknown as
      & Schema.Class<Self, Schema.Struct<typeof fields>, Cause.YieldableError & { readonly _tag: Tag }>
      & { readonly status: number }
  }

/** A bad request: path, id, body, command (400). */
export class AgentInvalid extends AgentErrorClass<AgentInvalid>()("AgentInvalid", {
  reason: "invalid",
  status: 400
}) {}

/** The bearer token is missing or wrong (401). */
export class AgentUnauthorized extends AgentErrorClass<AgentUnauthorized>()("AgentUnauthorized", {
  reason: "unauthorized",
  status: 401
}) {}

/** No such sandbox on this host, no such file, or no such route (404). */
export class AgentNotFound extends AgentErrorClass<AgentNotFound>()("AgentNotFound", {
  reason: "not_found",
  status: 404
}) {}

/** The sandbox is not running (409). */
export class AgentNotRunning extends AgentErrorClass<AgentNotRunning>()("AgentNotRunning", {
  reason: "not_running",
  status: 409
}) {}

/** A body or a file over its cap (413). */
export class AgentTooLarge extends AgentErrorClass<AgentTooLarge>()("AgentTooLarge", {
  reason: "too_large",
  status: 413
}) {}

/** The sandbox's kernel refused the file operation; `errno` names why (`ENOSPC`) (422). */
export class AgentRefused extends AgentErrorClass<AgentRefused>()("AgentRefused", {
  reason: "refused",
  status: 422,
  fields: { errno: Schema.optionalKey(Schema.String) }
}) {}

/** The host failed; the details are in the agent's log only (500). */
export class AgentFailed extends AgentErrorClass<AgentFailed>()("AgentFailed", {
  reason: "failed",
  status: 500
}) {}

/** Nothing answers on the sandbox's port a tunnel asked for (502). */
export class AgentBadGateway extends AgentErrorClass<AgentBadGateway>()("AgentBadGateway", {
  reason: "failed",
  status: 502
}) {}

/** The state of a background process does not allow it (exited, or too many running) (409). */
export class AgentConflict extends AgentErrorClass<AgentConflict>()("AgentConflict", {
  reason: "conflict",
  status: 409
}) {}

/** The host runs as many file transfers as it allows and none ended in time; retry (503). */
export class AgentBusy extends AgentErrorClass<AgentBusy>()("AgentBusy", {
  reason: "busy",
  status: 503
}) {}

/**
 * The org runs as many file transfers on this host as one org may (`org` of the files routes);
 * retry (429). Never a wait: an org's transfers do not queue behind another org's.
 */
export class AgentRateLimited extends AgentErrorClass<AgentRateLimited>()("AgentRateLimited", {
  reason: "rate_limited",
  status: 429
}) {}

/** The sandbox's disk is full (`ENOSPC`, `EDQUOT`): nothing of the upload is kept (507). */
export class AgentInsufficientStorage extends AgentErrorClass<AgentInsufficientStorage>()("AgentInsufficientStorage", {
  reason: "insufficient_storage",
  status: 507
}) {}

export type AgentError =
  | AgentInsufficientStorage
  | AgentInvalid
  | AgentUnauthorized
  | AgentNotFound
  | AgentNotRunning
  | AgentTooLarge
  | AgentRefused
  | AgentFailed
  | AgentBadGateway
  | AgentBusy
  | AgentRateLimited
  | AgentConflict

/** Every request needs `Authorization: Bearer <HostRecord.token>`. */
export class AgentAuthorization extends HttpApiMiddleware.Service<AgentAuthorization>()(
  "@svc/host-protocol/DataPlane/AgentAuthorization",
  { security: { bearer: HttpApiSecurity.bearer }, error: AgentUnauthorized }
) {}

/** The `Upgrade` protocol of a preview tunnel. */
export const TUNNEL_PROTOCOL = "svc-tunnel"

const params = { id: Schema.String }
export const AgentForkSnapshotRequest = Schema.Struct({
  layer: Schema.String.check(Schema.isPattern(/^[0-9a-f]{64}$/, { message: "layer: 64 hex digits" }))
})
/** `org`: the sandbox's org, whose share of the host's transfer slots the transfer takes. */
const FilesQuery = Schema.Struct({ path: Schema.String, org: Schema.optionalKey(Schema.String) })
/** An upload's: `mode` in octal (default 0644), `parents` "false" to refuse a missing folder (404). */
const WriteFileQuery = Schema.Struct({
  path: Schema.String,
  org: Schema.optionalKey(Schema.String),
  mode: Schema.optionalKey(Schema.String),
  parents: Schema.optionalKey(Schema.Literals(["true", "false"]))
})
/** An archive's format: `tar` or `tar.gz` (gzip). */
const ArchiveQuery = Schema.Struct({
  path: Schema.String,
  org: Schema.optionalKey(Schema.String),
  format: Schema.Literals(["tar", "tar.gz"])
})
/** The errors of a transfer. */
const transferErrors = [
  AgentInvalid,
  AgentNotFound,
  AgentNotRunning,
  AgentTooLarge,
  AgentRefused,
  AgentInsufficientStorage,
  AgentFailed,
  AgentBusy,
  AgentRateLimited
] as const

export class AgentSandboxesApi extends HttpApiGroup.make("sandboxes")
  .add(
    HttpApiEndpoint.post("exec", "/sandboxes/:id/exec", {
      params,
      payload: AgentExecRequest,
      success: AgentExecResult,
      error: [AgentInvalid, AgentNotFound, AgentNotRunning, AgentTooLarge, AgentFailed]
    }),
    HttpApiEndpoint.get("readFile", "/sandboxes/:id/files", {
      params,
      query: FilesQuery,
      success: [HttpApiSchema.StreamUint8Array({ contentType: "application/octet-stream" }), AgentFileListing],
      error: transferErrors
    }),
    HttpApiEndpoint.put("writeFile", "/sandboxes/:id/files", {
      params,
      query: WriteFileQuery,
      payload: HttpApiSchema.StreamUint8Array({ contentType: "application/octet-stream", maxBytes: MAX_UPLOAD_BYTES }),
      success: HttpApiSchema.NoContent,
      error: transferErrors
    }),
    // A folder as a tar stream, both ways (the archive's entries checked on the way in).
    HttpApiEndpoint.get("readArchive", "/sandboxes/:id/files/archive", {
      params,
      query: ArchiveQuery,
      success: HttpApiSchema.StreamUint8Array({ contentType: "application/x-tar" }),
      error: transferErrors
    }),
    HttpApiEndpoint.put("writeArchive", "/sandboxes/:id/files/archive", {
      params,
      query: ArchiveQuery,
      payload: HttpApiSchema.StreamUint8Array({ contentType: "application/octet-stream", maxBytes: MAX_UPLOAD_BYTES }),
      success: HttpApiSchema.NoContent,
      error: transferErrors
    }),
    HttpApiEndpoint.get("stats", "/sandboxes/:id/stats", {
      params,
      success: AgentSandboxStats,
      error: [AgentInvalid, AgentNotFound, AgentNotRunning, AgentFailed]
    }),
    // 400 `invalid`: a port the sandbox does not expose.
    HttpApiEndpoint.get("tunnel", "/sandboxes/:id/ports/:port/tunnel", {
      params: { id: Schema.String, port: Schema.String },
      success: HttpApiSchema.Upgrade({ protocol: TUNNEL_PROTOCOL }),
      // 503 `busy`: the sandbox has as many tunnels open on this host as it may.
      error: [AgentInvalid, AgentNotFound, AgentNotRunning, AgentFailed, AgentBadGateway, AgentBusy]
    }),
    // A fork's snapshot (docs/architecture.md#forks): the running sandbox's writable layer copied
    // into the layer `layer` on this host, once; its forks' creates then stack it.
    HttpApiEndpoint.post("forkSnapshot", "/sandboxes/:id/fork-snapshot", {
      params,
      payload: AgentForkSnapshotRequest,
      success: HttpApiSchema.NoContent,
      error: [AgentInvalid, AgentNotFound, AgentNotRunning, AgentFailed]
    })
  )
  .middleware(AgentAuthorization)
{}

// ---------------------------------------------------------------------------------------------
// Processes and the terminal

/** The `Upgrade` protocol of a terminal (then `PtyFrames` both ways). */
export const PTY_PROTOCOL = "svc-pty"

/**
 * One server-sent event of a streamed command: `stdout` and `stderr` carry
 * `{"data": "<base64>"}`, the last one, `exit`, `{exit_code, duration_ms, reason?}`. The same
 * events as the /v1 API's: the API passes them on.
 */
export const AgentProcessEvent = Schema.Struct({
  id: Schema.optional(Schema.String),
  event: Schema.Literals(["stdout", "stderr", "exit"]),
  data: Schema.String
})
export type AgentProcessEvent = typeof AgentProcessEvent.Type

const ProcessEvents = HttpApiSchema.StreamSse({ events: AgentProcessEvent })

export const AgentProcessRequest = Schema.Struct({
  cmd: Schema.Array(Schema.String),
  cwd: Schema.optionalKey(Schema.String),
  env: Schema.optionalKey(Schema.Record(Schema.String, Schema.String)),
  stdin: Schema.optionalKey(Schema.Boolean),
  /**
   * Whether it keeps the sandbox from being idle while it runs (default true): false for a code
   * context's interpreter, whose runs are the activity.
   */
  keeps_awake: Schema.optionalKey(Schema.Boolean)
})
export type AgentProcessRequest = typeof AgentProcessRequest.Type

/** A background process as /v1 shows it. */
export const AgentProcess = Schema.Struct({
  pid: Schema.Int,
  cmd: Schema.Array(Schema.String),
  state: Schema.Literals(["running", "exited"]),
  exit_code: Schema.NullOr(Schema.Int),
  startedAt: Schema.String,
  exitedAt: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(Schema.Literals(["exited", "killed", "sandbox_stopped"]))
})
export type AgentProcess = typeof AgentProcess.Type

export const AgentProcessList = Schema.Struct({ processes: Schema.Array(AgentProcess) })

export const AgentSignalRequest = Schema.Struct({ signal: Schema.Literals(["INT", "TERM", "KILL", "HUP"]) })

const processParams = { id: Schema.String, pid: Schema.String }
const processErrors = [AgentInvalid, AgentNotFound, AgentNotRunning, AgentConflict, AgentTooLarge, AgentFailed] as const

export class AgentProcessesApi extends HttpApiGroup.make("processes")
  .add(
    HttpApiEndpoint.post("execStream", "/sandboxes/:id/exec/stream", {
      params,
      payload: AgentExecRequest,
      success: ProcessEvents,
      error: processErrors
    }),
    HttpApiEndpoint.post("start", "/sandboxes/:id/processes", {
      params,
      payload: AgentProcessRequest,
      success: AgentProcess.pipe(HttpApiSchema.status(201)),
      error: processErrors
    }),
    HttpApiEndpoint.get("list", "/sandboxes/:id/processes", {
      params,
      success: AgentProcessList,
      error: processErrors
    }),
    HttpApiEndpoint.get("get", "/sandboxes/:id/processes/:pid", {
      params: processParams,
      success: AgentProcess,
      error: processErrors
    }),
    HttpApiEndpoint.get("output", "/sandboxes/:id/processes/:pid/output", {
      params: processParams,
      query: Schema.Struct({ follow: Schema.optionalKey(Schema.Literals(["true", "false"])) }),
      success: ProcessEvents,
      error: processErrors
    }),
    HttpApiEndpoint.post("stdin", "/sandboxes/:id/processes/:pid/stdin", {
      params: processParams,
      query: Schema.Struct({ close: Schema.optionalKey(Schema.Literals(["true", "false"])) }),
      payload: HttpApiSchema.StreamUint8Array({
        contentType: "application/octet-stream",
        maxBytes: MAX_EXEC_BODY_BYTES
      }),
      success: HttpApiSchema.NoContent,
      error: processErrors
    }),
    HttpApiEndpoint.post("signal", "/sandboxes/:id/processes/:pid/signal", {
      params: processParams,
      payload: AgentSignalRequest,
      success: HttpApiSchema.Accepted,
      error: processErrors
    }),
    HttpApiEndpoint.get("pty", "/sandboxes/:id/pty", {
      params,
      query: Schema.Struct({ cols: Schema.String, rows: Schema.String }),
      success: HttpApiSchema.Upgrade({ protocol: PTY_PROTOCOL }),
      error: processErrors
    })
  )
  .middleware(AgentAuthorization)
{}

// ---------------------------------------------------------------------------------------------
// File management: stat, mkdir, move, remove (no transfer: no slot is taken)

/** An entry as GET /v1/sandboxes/{id}/files/stat shows it (a final link not followed). */
export const AgentFileInfo = Schema.Struct({
  name: Schema.String,
  path: Schema.String,
  type: Schema.Literals(["file", "dir", "symlink", "other"]),
  size: Schema.Int,
  mode: Schema.String,
  uid: Schema.Int,
  gid: Schema.Int,
  mtime: Schema.String,
  target: Schema.NullOr(Schema.String)
})
export type AgentFileInfo = typeof AgentFileInfo.Type

export const AgentMkdirRequest = Schema.Struct({ path: Schema.String, parents: Schema.Boolean, mode: Schema.Int })
/** `created` false: `parents` found the folder there already. */
export const AgentMkdirResult = Schema.Struct({ created: Schema.Boolean, info: AgentFileInfo })
export const AgentMoveRequest = Schema.Struct({ from: Schema.String, to: Schema.String, overwrite: Schema.Boolean })
export const AgentRemoveRequest = Schema.Struct({ path: Schema.String, recursive: Schema.Boolean })

/** 409 `conflict`: the target is in the way (it exists, a folder is not empty). */
const fileOpErrors = [AgentInvalid, AgentNotFound, AgentNotRunning, AgentConflict, AgentRefused, AgentFailed] as const

/**
 * One change under a watched folder: `event` its type (`create`, `modify`, `delete`, `move`,
 * then at most one `overflow`, the last), `data` `{"type", "path", "is_dir", "from"?}` as JSON.
 */
export const AgentWatchEvent = Schema.Struct({
  id: Schema.optional(Schema.String),
  event: Schema.Literals(["create", "modify", "delete", "move", "overflow"]),
  data: Schema.String
})
export type AgentWatchEvent = typeof AgentWatchEvent.Type

export class AgentFilesApi extends HttpApiGroup.make("files")
  .add(
    // 503 `busy`: the sandbox has as many watchers on this host as it may.
    HttpApiEndpoint.get("watch", "/sandboxes/:id/files/watch", {
      params,
      query: Schema.Struct({ path: Schema.String, recursive: Schema.optionalKey(Schema.Literals(["true", "false"])) }),
      success: HttpApiSchema.StreamSse({ events: AgentWatchEvent }),
      error: [...fileOpErrors, AgentBusy]
    }),
    HttpApiEndpoint.get("stat", "/sandboxes/:id/files/stat", {
      params,
      query: Schema.Struct({ path: Schema.String }),
      success: AgentFileInfo,
      error: fileOpErrors
    }),
    HttpApiEndpoint.post("mkdir", "/sandboxes/:id/files/mkdir", {
      params,
      payload: AgentMkdirRequest,
      success: AgentMkdirResult,
      error: fileOpErrors
    }),
    HttpApiEndpoint.post("move", "/sandboxes/:id/files/move", {
      params,
      payload: AgentMoveRequest,
      success: AgentFileInfo,
      error: fileOpErrors
    }),
    HttpApiEndpoint.post("remove", "/sandboxes/:id/files/remove", {
      params,
      payload: AgentRemoveRequest,
      success: HttpApiSchema.NoContent,
      error: fileOpErrors
    })
  )
  .middleware(AgentAuthorization)
{}

export class AgentApi extends HttpApi.make("agent").add(AgentSandboxesApi).add(AgentProcessesApi).add(AgentFilesApi) {}
