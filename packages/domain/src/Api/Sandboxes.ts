/**
 * The sandbox routes (docs/contract.md#sandboxes, #single-sandbox-scope). Every route needs the
 * `sandboxes` scope (`read` for GET, `write` otherwise) and, for a `sandbox:<id>` key, the
 * single-sandbox policy: its sandbox and direct children only (403 `sandbox_out_of_scope`),
 * and a create makes a child of its sandbox. A sandbox of another org is 404.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import {
  Conflict,
  EgressBeyondCeiling,
  FileRefused,
  IdempotencyKeyReused,
  InsufficientScope,
  InsufficientStorage,
  InvalidRequest,
  NoCapacity,
  NotFound,
  PayloadTooLarge,
  QuotaExceeded,
  RateLimited,
  SandboxOutOfScope,
  Unavailable,
  UnsupportedMediaType,
  UsageLimitReached
} from "../Errors.ts"
import { SandboxId } from "../Ids.ts"
import {
  BindSecretRequest,
  CreateSandboxRequest,
  ExecRequest,
  ExecResult,
  ListSandboxesQuery,
  NetworkPolicyRequest,
  Sandbox,
  SandboxFilePath,
  SandboxPage,
  SandboxStats
} from "../Sandbox.ts"
import { Bounded, TimestampText } from "../Text.ts"
import { Access } from "./Auth.ts"
import { ProcessEvents } from "./Processes.ts"

export class CreateSandboxBody
  extends Schema.Class<CreateSandboxBody>("CreateSandboxRequest")(CreateSandboxRequest.fields)
{}

export class NetworkPolicyBody
  extends Schema.Class<NetworkPolicyBody>("NetworkPolicyRequest")(NetworkPolicyRequest.fields)
{}

export class BindSecretBody extends Schema.Class<BindSecretBody>("BindSecretRequest")(BindSecretRequest.fields) {}

export class ExecBody extends Schema.Class<ExecBody>("ExecRequest")(ExecRequest.fields) {}

export const FileEntry = Schema.Struct({
  /** One file name: at most 255 bytes (NAME_MAX). */
  name: Bounded(255),
  type: Schema.Literals(["file", "dir", "symlink", "other"]),
  size: Schema.Int,
  mtime: TimestampText
})
export type FileEntry = typeof FileEntry.Type

/** The most entries a folder's listing carries (the listing itself has no cap yet: a larger folder fails). */
export const MAX_LISTING = 100_000

/** GET .../files on a folder. */
export const FileListing = Schema.Struct({ entries: Schema.Array(FileEntry).check(Schema.isMaxLength(MAX_LISTING)) })
export type FileListing = typeof FileListing.Type

export const FilesQuery = Schema.Struct({ path: SandboxFilePath })

export const IdempotencyKey = Schema.String.check(Schema.isMinLength(8), Schema.isMaxLength(255))

const params = { id: SandboxId }

// ---------------------------------------------------------------------------------------------
// File management (docs/contract.md#files): stat, mkdir, move, remove

/** GET .../files/stat: the entry itself (a final symlink not followed). */
export const FileInfo = Schema.Struct({
  name: Bounded(255),
  path: Bounded(4096),
  type: Schema.Literals(["file", "dir", "symlink", "other"]),
  size: Schema.Int,
  /** The permission bits in octal: "0644". */
  mode: Bounded(5),
  uid: Schema.Int,
  gid: Schema.Int,
  mtime: TimestampText,
  /** A symlink's target as written; null for anything else. */
  target: Schema.NullOr(Bounded(4096))
})
export type FileInfo = typeof FileInfo.Type

/** Permission bits in octal, "755" or "0755". */
export const OctalMode = Schema.String.check(
  Schema.isMaxLength(5),
  Schema.isPattern(/^0?[0-7]{3,4}$/, { expected: "an octal mode such as \"0755\"" })
)

export class MkdirBody extends Schema.Class<MkdirBody>("MkdirRequest")({
  path: SandboxFilePath,
  /** Make missing parents; an existing folder is then 200 (default true). */
  parents: Schema.optionalKey(Schema.Boolean),
  mode: Schema.optionalKey(OctalMode)
}) {}

export class MoveBody extends Schema.Class<MoveBody>("MoveRequest")({
  from: SandboxFilePath,
  to: SandboxFilePath,
  overwrite: Schema.optionalKey(Schema.Boolean)
}) {}

export const RemoveQuery = Schema.Struct({
  path: SandboxFilePath.check(
    Schema.makeFilter((p: string) => !/^\/+$/.test(p) || "/ cannot be removed", { expected: "a path other than /" })
  ),
  recursive: Schema.optionalKey(Schema.Literals(["true", "false"]))
})

const fileOpErrors = [InvalidRequest, NotFound, Conflict, FileRefused, SandboxOutOfScope, Unavailable] as const

// ---------------------------------------------------------------------------------------------
// Uploads and archives (docs/contract.md#files): streamed, bounded by the sandbox's disk only

/** PUT .../files: `mode` (octal, default "0644"), `parents` (default true; false: a missing folder is 404). */
export const WriteFileQuery = Schema.Struct({
  path: SandboxFilePath,
  mode: Schema.optionalKey(OctalMode),
  parents: Schema.optionalKey(Schema.Literals(["true", "false"]))
})

export const ArchiveQuery = Schema.Struct({
  path: SandboxFilePath,
  /** GET only: `tar` (default) or `tar.gz`. */
  format: Schema.optionalKey(Schema.Literals(["tar", "tar.gz"]))
})

const transferErrors = [
  InvalidRequest,
  NotFound,
  Conflict,
  PayloadTooLarge,
  FileRefused,
  InsufficientStorage,
  SandboxOutOfScope,
  RateLimited,
  Unavailable
] as const

/** One change under a watched folder; `data` is `{"type", "path", "is_dir", "from"?}` as JSON. */
export const FileWatchEvent = Schema.Struct({
  id: Schema.optional(Bounded(64)),
  event: Schema.Literals(["create", "modify", "delete", "move", "overflow"]),
  data: Bounded(16 * 1024)
})

export const WatchQuery = Schema.Struct({
  path: SandboxFilePath,
  recursive: Schema.optionalKey(Schema.Literals(["true", "false"]))
})

const archiveEndpoints = [
  HttpApiEndpoint.get("fileWatch", "/v1/sandboxes/:id/files/watch", {
    params,
    query: WatchQuery,
    success: HttpApiSchema.StreamSse({ events: FileWatchEvent }),
    error: fileOpErrors
  }).annotateMerge(OpenApi.annotations({
    description: "Server-sent events of the changes under `path` (`recursive` default true) from once the watch " +
      "is in place: `create`, `modify`, `delete`, `move` (`from`: the old path), each `{type, path, is_dir}`; " +
      "coalesced (a modify right after a change of the same path is left out). A watcher inside the sandbox " +
      "(its own inotify instance) does the watching. A client that falls 1,024 events behind gets a last " +
      "`overflow` and the stream ends; it also ends when `path` goes or the sandbox stops. At most 16 watchers " +
      "per sandbox (503 past that)."
  })),
  HttpApiEndpoint.get("readArchive", "/v1/sandboxes/:id/files/archive", {
    params,
    query: ArchiveQuery,
    success: HttpApiSchema.StreamUint8Array({ contentType: "application/x-tar" }),
    error: transferErrors
  }).annotateMerge(OpenApi.annotations({
    description: "The folder at `path` as a tar (`format=tar`, `application/x-tar`, the default) or tar.gz " +
      "(`format=tar.gz`, `application/gzip`), streamed: links are stored as links, `/proc` and `/sys` are left " +
      "out of `/`. 404 if absent, 400 for a file. Bounded as every transfer (503, 429 `rate_limited`, idle close)."
  })),
  HttpApiEndpoint.put("writeArchive", "/v1/sandboxes/:id/files/archive", {
    params,
    query: ArchiveQuery,
    success: HttpApiSchema.NoContent,
    error: [...transferErrors, UnsupportedMediaType]
  }).annotateMerge(OpenApi.annotations({
    description: "Extracts the body, a tar (`Content-Type: application/x-tar`, or `application/octet-stream`) or " +
      "tar.gz (`application/gzip`, `application/x-gzip`), under `path` (made with its parents; entries merge " +
      "into an existing folder, replacing files): 204 once every entry is written. An entry that would land " +
      "outside `path` (`..`, an absolute name, through a symlink of the archive or of the folder, a hard link " +
      "out), a device node, a stream that is not a tar or a cut one (gzip included): 400, nothing written. A " +
      "full disk: 507 `insufficient_storage`, nothing written. Other content types: 415."
  }))
] as const

const fileOpEndpoints = [
  HttpApiEndpoint.get("fileStat", "/v1/sandboxes/:id/files/stat", {
    params,
    query: FilesQuery,
    success: FileInfo,
    error: fileOpErrors
  }).annotateMerge(OpenApi.annotations({
    description: "The entry at `path` without following a final symlink: `{name, path, type, size, mode, uid, " +
      "gid, mtime, target}` (`target`: a symlink's, else null). 404 `not_found` if absent; /proc and /sys are 400."
  })),
  HttpApiEndpoint.post("mkdir", "/v1/sandboxes/:id/files/mkdir", {
    params,
    payload: MkdirBody,
    success: FileInfo.pipe(HttpApiSchema.status(201)),
    error: fileOpErrors
  }).annotateMerge(OpenApi.annotations({
    description: "Makes the folder (`parents` default true, `mode` default \"0755\"): 201 its stat. A folder " +
      "already there with `parents`: 200; without `parents`, or anything else in the way: 409 `conflict`."
  })),
  HttpApiEndpoint.post("move", "/v1/sandboxes/:id/files/move", {
    params,
    payload: MoveBody,
    success: FileInfo,
    error: fileOpErrors
  }).annotateMerge(OpenApi.annotations({
    description: "Renames `from` to `to` (a symlink is moved as a link): 200 the stat of `to`. `to` existing " +
      "without `overwrite`: 409 `conflict`; with it, `to` is replaced (a folder whole). A folder into itself: 400."
  })),
  HttpApiEndpoint.delete("removeFile", "/v1/sandboxes/:id/files", {
    params,
    query: RemoveQuery,
    success: HttpApiSchema.NoContent,
    error: fileOpErrors
  }).annotateMerge(OpenApi.annotations({
    description: "Removes the entry (a symlink, not its target): 204. A folder with entries needs " +
      "`recursive=true` (else 409 `conflict`); `/` is 400."
  }))
] as const

export class SandboxesApi extends HttpApiGroup.make("sandboxes")
  .add(
    HttpApiEndpoint.post("create", "/v1/sandboxes", {
      payload: CreateSandboxBody,
      headers: { "idempotency-key": Schema.optionalKey(IdempotencyKey) },
      success: Sandbox.pipe(HttpApiSchema.status(201)),
      error: [
        InvalidRequest,
        Conflict,
        IdempotencyKeyReused,
        InsufficientScope,
        SandboxOutOfScope,
        EgressBeyondCeiling,
        QuotaExceeded,
        UsageLimitReached,
        Unavailable,
        NoCapacity
      ]
    }).annotateMerge(OpenApi.annotations({
      description: "Creates a sandbox: 201 with the `pending` record. The platform places it on a live host of the " +
        "region with room before it answers and starts it; it ends `running`, or `error` with `errorMessage`. When " +
        "no live host has room for it now (or none is live at all) it is refused at once: 503 `no_capacity` with " +
        "`Retry-After`, nothing created; a region with no live host is created and ends `error` naming the live " +
        "regions. `parent_id` must be a " +
        "sandbox of the org (400 otherwise, 409 while it is being deleted); with a `sandbox:<id>` key the new " +
        "sandbox is a child of that sandbox. `Idempotency-Key` (8 to 255 characters): the same key and body within " +
        "24 h answer 200 with the first response; another body is 422 `idempotency_key_reused`. 429 `quota_exceeded` " +
        "when the org has as many sandboxes as `SVC_ORG_MAX_SANDBOXES` allows, or runs as many as " +
        "`SVC_ORG_MAX_RUNNING_SANDBOXES` allows. `network: {allow_out, deny_out}`: its egress policy (see PUT " +
        ".../network); with a `sandbox:<id>` key the child starts from its parent's policy, `deny_out` adds to it " +
        "and `allow_out` may only narrow it (403 `egress_beyond_ceiling`). `secrets: [secret_id]` binds " +
        "secrets of the org (needs `secrets:use` too; an id that is not " +
        "a secret of the org is 400 naming the entry). 402 `usage_limit_reached` while the org is blocked at its " +
        "hard usage limit (GET /v1/billing/usage)."
    })),
    HttpApiEndpoint.get("list", "/v1/sandboxes", {
      query: ListSandboxesQuery,
      success: SandboxPage,
      error: [InvalidRequest, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Newest first. `state`: one state or a comma-separated list. `paginated=false`: every row (up to " +
        "10,000, and up to about 8 MiB of JSON) in one response, `limit` = the rows returned; `has_more` is true " +
        "when a cap cut it short (ask again from `offset + limit`). With a `sandbox:<id>` key: that sandbox and its " +
        "direct children only."
    })),
    HttpApiEndpoint.get("get", "/v1/sandboxes/:id", {
      params,
      success: Sandbox,
      error: [NotFound, SandboxOutOfScope, Unavailable]
    }),
    HttpApiEndpoint.delete("delete", "/v1/sandboxes/:id", {
      params,
      success: Sandbox.pipe(HttpApiSchema.status(202)),
      error: [NotFound, SandboxOutOfScope, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "202 with the record (`deleting`, or `deleted` when its host is down); every descendant is " +
        "deleted with it. Again on a deleting or deleted sandbox: the same record."
    })),
    HttpApiEndpoint.post("stop", "/v1/sandboxes/:id/stop", {
      params,
      success: Sandbox.pipe(HttpApiSchema.status(202)),
      error: [NotFound, Conflict, SandboxOutOfScope, Unavailable]
    }).annotateMerge(OpenApi.annotations({ description: "A running sandbox: 202 `stopping`; any other state: 409." })),
    HttpApiEndpoint.post("start", "/v1/sandboxes/:id/start", {
      params,
      success: Sandbox.pipe(HttpApiSchema.status(202)),
      error: [NotFound, Conflict, SandboxOutOfScope, QuotaExceeded, UsageLimitReached, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "A stopped sandbox: 202 `starting`; any other state: 409. 429 `quota_exceeded` when the org " +
        "runs as many sandboxes as `SVC_ORG_MAX_RUNNING_SANDBOXES` allows. 402 `usage_limit_reached` while the " +
        "org is blocked at its hard usage limit."
    })),
    HttpApiEndpoint.put("network", "/v1/sandboxes/:id/network", {
      params,
      payload: NetworkPolicyBody,
      success: Sandbox,
      error: [InvalidRequest, NotFound, Conflict, SandboxOutOfScope, EgressBeyondCeiling, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Replaces the sandbox's egress policy (an omitted list is empty): rules are CIDRs " +
        "(`203.0.113.0/24`), addresses or domains (`example.com`, `*.example.com`), at most 100 per list. " +
        "`deny_out` wins; with no `allow_out` every public address is allowed. A running sandbox's next " +
        "connection follows it. 200 with the record; 409 for a deleting or deleted sandbox. With a `sandbox:<id>` " +
        "key the policy of the key's sandbox is a ceiling: every `deny_out` rule of it kept, `allow_out` within " +
        "its own (403 `egress_beyond_ceiling` otherwise)."
    })),
    HttpApiEndpoint.post("bindSecret", "/v1/sandboxes/:id/secrets", {
      params,
      payload: BindSecretBody,
      success: HttpApiSchema.NoContent,
      error: [InvalidRequest, NotFound, Conflict, SandboxOutOfScope, Unavailable]
    }).annotateMerge(Access.resource("sandboxes", { also: ["secrets:use"] })).annotateMerge(OpenApi.annotations({
      description: "Binds a secret of the org (`sandboxes:write` and `secrets:use`): the egress proxy writes its " +
        "header onto the sandbox's requests to the secret's allowed hosts from the next request. 204; again " +
        "for a bound secret: 204, nothing changes. A `secret_id` that is not a secret of the org is 400; a " +
        "deleting or deleted sandbox, or one with 32 secrets already, is 409."
    })),
    HttpApiEndpoint.post("exec", "/v1/sandboxes/:id/exec", {
      params,
      payload: ExecBody,
      // `Accept: text/event-stream`: the output as it comes (docs/contract.md#sandbox-processes).
      success: [ExecResult, ProcessEvents],
      error: [InvalidRequest, NotFound, Conflict, PayloadTooLarge, SandboxOutOfScope, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Runs `cmd` in the sandbox and waits for it (at most `timeout_ms`). 409 unless it is running. " +
        "Outputs are UTF-8 text, each capped at 1 MiB by the host: `truncated` is true when either was cut. " +
        "With `Accept: text/event-stream`: server-sent events as the command runs, `stdout` and `stderr` " +
        "(`{data: <base64>}`, not capped), then one `exit` (`{exit_code, duration_ms}`)."
    })),
    HttpApiEndpoint.get("stats", "/v1/sandboxes/:id/stats", {
      params,
      success: SandboxStats,
      error: [NotFound, Conflict, SandboxOutOfScope, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "A running sandbox's usage now, read from its host: CPU time, memory, processes, and the bytes " +
        "its network link received (`net_bytes_in`) and sent (`net_bytes_out`) since this run began. 409 unless " +
        "it is running."
    })),
    HttpApiEndpoint.get("readFile", "/v1/sandboxes/:id/files", {
      params,
      query: FilesQuery,
      success: [HttpApiSchema.StreamUint8Array({ contentType: "application/octet-stream" }), FileListing],
      error: transferErrors
    }).annotateMerge(OpenApi.annotations({
      description:
        "A file's bytes (`application/octet-stream`, streamed), or for a folder `{entries: [{name, type, size, mtime}]}`. " +
        "Paths resolve inside the sandbox's root only; paths under /proc and /sys are 400 (links to them included). " +
        "Files of any size stream (the sandbox's disk bounds them); a read the sandbox's kernel refuses is 422 `file_refused` with `errno`. " +
        "Transfers beyond the API's or the host's bound wait, then 503; beyond the org's own share they are 429 " +
        "`rate_limited` at once. A transfer that moves no byte for `SVC_API_TRANSFER_IDLE_TIMEOUT` (60 s) has its " +
        "connection closed."
    })),
    HttpApiEndpoint.put("writeFile", "/v1/sandboxes/:id/files", {
      params,
      query: WriteFileQuery,
      success: HttpApiSchema.NoContent,
      error: transferErrors
    }).annotateMerge(OpenApi.annotations({
      description: "The request body (any content type, raw bytes, streamed to the sandbox's disk: its `disk_gb` " +
        "is the only bound) becomes the file at `path` with `mode` (default 0644), replacing it once every byte " +
        "arrived (a cut upload leaves the old file). Missing folders are made unless `parents=false` (then 404). " +
        "A full disk is 507 `insufficient_storage`, nothing of the upload left. A device is written in " +
        "place; paths under /proc and /sys are 400. A write the sandbox's kernel refuses otherwise (a read-only " +
        "file system, /dev/full) is 422 `file_refused` with `errno` (`EROFS`, `EIO`, `EACCES`, `EPERM`...). " +
        "204. Bounded as a download: 503 beyond the API's or the host's transfers, 429 `rate_limited` beyond the " +
        "org's share, the connection closed after `SVC_API_TRANSFER_IDLE_TIMEOUT` (60 s) without a byte."
    }))
  )
  .add(...fileOpEndpoints)
  .add(...archiveEndpoints)
  .annotateMerge(Access.resource("sandboxes"))
  .annotateMerge(OpenApi.annotations({ title: "Sandboxes" }))
{}
