/**
 * The sandbox driver: how a host agent makes, runs and reaches into sandboxes on its own
 * machine. The interface hides the isolation mechanism: the namespaces driver
 * (`Driver/Bubblewrap.ts`) implements it here; a microVM driver (vsock to an in-guest agent)
 * would implement the same service on hosts with KVM.
 */
import type { HostLimits } from "@svc/host-protocol/Protocol"
import { VolumeMount } from "@svc/host-protocol/Volumes"
import { Context, type Effect, Schema, type Scope, type Stream } from "effect"
import type * as Net from "node:net"
import type { Readable } from "node:stream"
import type { SpliceFailed } from "./Driver/Splice.ts"
import type { LayerImport } from "./ImageLayers.ts"

// ---------------------------------------------------------------------------------------------
// Inputs

/**
 * The driver's name of a sandbox on this host: a platform id (`sbx_...`, the domain's `SandboxId`)
 * or one of the agent's own (`pool-<hex>` warm pool entries, test ids). Ids name directories,
 * cgroups and the hostname: a tight grammar keeps them safe in all.
 */
export const DriverSandboxId = Schema.String.check(
  Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/, {
    message: "sandbox id: 1 to 63 of [A-Za-z0-9_-], starting with a letter or digit"
  })
)
export type DriverSandboxId = typeof DriverSandboxId.Type

/** Values must not carry NUL (they end up in execve's environment block). */
export const EnvValue = Schema.String.check(
  Schema.isPattern(/^[^\0]{0,32768}$/, { message: "environment value: at most 32768 chars, no NUL" })
)
const envNamePattern = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/
// Record keys are checked here explicitly: a key schema's own checks are not applied on decode.
export const Env = Schema.Record(Schema.String, EnvValue).check(
  Schema.makeFilter((env) => Object.keys(env).length <= 128 || "at most 128 environment variables"),
  Schema.makeFilter((env) =>
    Object.keys(env).every((name) => envNamePattern.test(name)) || "environment variable names: [A-Za-z_][A-Za-z0-9_]*"
  )
)
export type Env = typeof Env.Type

const PositiveInt = (max: number) => Schema.Int.check(Schema.isGreaterThanOrEqualTo(1), Schema.isLessThanOrEqualTo(max))

/** A layer's name: the sha256 of its tar, hex (`ImageLayers.ts`). */
export const LayerDigest = Schema.String.check(Schema.isPattern(/^[0-9a-f]{64}$/, { message: "layer: 64 hex digits" }))

/** Most layers one image stacks (overlayfs takes its lower folders in one mount option of 4 KiB). */
export const MAX_LAYERS = 24

/** The roots an image stacks its layers on: the built-in `base`, the platform-built `debian` and `code`. */
export const ImageRoot = Schema.Literals(["base", "debian", "code"])
export type ImageRoot = typeof ImageRoot.Type

/** What `create` needs. `template` is a template name known to the driver (`base` is built in). */
/** A user inside a sandbox, numeric `uid:gid` (each 0..65535). */
export const SandboxUser = Schema.String.check(
  Schema.isPattern(/^\d{1,5}:\d{1,5}$/, { message: "user: uid:gid, numeric" }),
  Schema.makeFilter((text) => text.split(":").every((n) => Number(n) <= 65_535) || "user: each id 0 to 65535")
)

export class SandboxSpec extends Schema.Class<SandboxSpec>("@svc/host/SandboxSpec")({
  sandboxId: DriverSandboxId,
  template: Schema.String.check(
    Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/, { message: "template name" })
  ),
  env: Env,
  cpu: PositiveInt(64),
  ramMb: Schema.Int.check(Schema.isGreaterThanOrEqualTo(16), Schema.isLessThanOrEqualTo(262_144)),
  diskGb: PositiveInt(4096),
  exposedPorts: Schema.Array(PositiveInt(65_535)).check(
    Schema.makeFilter((ports) => ports.length <= 64 || "at most 64 exposed ports")
  ),
  /**
   * Image layers over the template (bottom first), each extracted on this host already
   * (`importLayer`): the sandbox's lower folders are these, top first, then the template's.
   */
  layers: Schema.optionalKey(
    Schema.Array(LayerDigest).check(
      Schema.makeFilter((layers) => layers.length <= MAX_LAYERS || `at most ${MAX_LAYERS} layers`)
    )
  ),
  /** Volumes mounted into the sandbox at each start (`Driver/Volumes.ts`); absent: none. */
  volumes: Schema.optionalKey(
    Schema.Array(VolumeMount).check(Schema.makeFilter((v) => v.length <= 16 || "at most 16 volumes"))
  ),
  /**
   * A fork (`Driver/Forks.ts`): its lower folders are the layer `layer` (a copy of `sandboxId`'s
   * writable layer, made by `snapshotLayer`) over that sandbox's own lower folders, and its env
   * is that sandbox's with `env` over it; `template` and `layers` are then not used.
   */
  forkOf: Schema.optionalKey(Schema.Struct({ sandboxId: DriverSandboxId, layer: LayerDigest })),
  /** The cwd of an exec that names none (an image's `WorkingDir`); absent: `/`. */
  workdir: Schema.optionalKey(Schema.suspend(() => SandboxPath)),
  /** The user an exec runs as when it names none (an image's `User`); absent: root. */
  user: Schema.optionalKey(SandboxUser)
}) {}

/** A path inside the sandbox: absolute, no NUL, bounded. `..` cannot leave the sandbox root. */
export const SandboxPath = Schema.String.check(
  Schema.isPattern(/^\/[^\0]{0,4095}$/, { message: "path: absolute, at most 4096 chars, no NUL" })
)

export class DriverExecRequest extends Schema.Class<DriverExecRequest>("@svc/host/DriverExecRequest")({
  cmd: Schema.Array(Schema.String.check(Schema.isPattern(/^[^\0]{0,131072}$/, { message: "argument without NUL" })))
    .check(
      Schema.makeFilter((argv) =>
        (argv.length >= 1 && argv.length <= 4096 && argv[0]!.length > 0) ||
        "cmd: 1 to 4096 arguments, the first not empty"
      )
    ),
  cwd: Schema.optionalKey(SandboxPath),
  /** `uid:gid` inside the sandbox; absent: the sandbox's default user (root unless its image says). */
  user: Schema.optionalKey(SandboxUser),
  env: Schema.optionalKey(Env),
  stdin: Schema.optionalKey(Schema.Union([Schema.String, Schema.Uint8Array])),
  timeoutMs: Schema.optionalKey(PositiveInt(24 * 3600 * 1000)),
  maxOutputBytes: Schema.optionalKey(PositiveInt(16 * 1024 * 1024))
}) {}

export const FileMode = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0), Schema.isLessThanOrEqualTo(0o7777))

// ---------------------------------------------------------------------------------------------
// Outputs

export const LimitStatus = Schema.Struct({
  /** `applied`, or why the host could not enforce it (`unavailable: ...`, `not enforced: ...`). */
  memory: Schema.String,
  cpu: Schema.String,
  pids: Schema.String,
  disk: Schema.String
})
export type LimitStatus = typeof LimitStatus.Type

export class SandboxInfo extends Schema.Class<SandboxInfo>("@svc/host/SandboxInfo")({
  sandboxId: DriverSandboxId,
  /** The sandbox's init as seen from the host (namespaces driver only). */
  pid: Schema.optionalKey(Schema.Int),
  internalIp: Schema.String,
  /** Always absent here; a microVM driver reports its vsock context id. */
  vsockCid: Schema.optionalKey(Schema.Int),
  startedAt: Schema.String,
  limits: LimitStatus
}) {}

export class DriverExecResult extends Schema.Class<DriverExecResult>("@svc/host/DriverExecResult")({
  /** The command's exit status; 128 + signal number when a signal ended it. */
  exitCode: Schema.Int,
  stdout: Schema.Uint8Array,
  stderr: Schema.Uint8Array,
  durationMs: Schema.Number,
  stdoutTruncated: Schema.Boolean,
  stderrTruncated: Schema.Boolean,
  /** The timeout fired: every process of this exec was killed. */
  timedOut: Schema.Boolean
}) {}

export const EntryType = Schema.Literals(["file", "dir", "symlink", "other"])
export type EntryType = typeof EntryType.Type

export class FileStat extends Schema.Class<FileStat>("@svc/host/FileStat")({
  type: EntryType,
  size: Schema.Int,
  /** Modification time, ISO 8601. */
  mtime: Schema.String
}) {}

/** What `fileInfo` reports (GET /v1/sandboxes/{id}/files/stat): the entry itself, links not followed. */
export class FileInfo extends Schema.Class<FileInfo>("@svc/host/FileInfo")({
  name: Schema.String,
  path: Schema.String,
  type: EntryType,
  size: Schema.Int,
  /** The permission bits in octal, "0644". */
  mode: Schema.String,
  uid: Schema.Int,
  gid: Schema.Int,
  mtime: Schema.String,
  /** A symlink's target as written, else null. */
  target: Schema.NullOr(Schema.String)
}) {}

export class DirEntry extends Schema.Class<DirEntry>("@svc/host/DirEntry")({
  name: Schema.String,
  type: EntryType,
  size: Schema.Int,
  mtime: Schema.String
}) {}

/** `readFileStream`'s result: the size when the file system knows it (not for /proc files). */
export interface FileStream {
  readonly size: number | null
  readonly stream: Stream.Stream<Uint8Array, SandboxFileError | DriverFailure>
}

/** A file's `readFileStream`: its bytes also as a Node stream. */
export interface FileReadStream extends FileStream {
  /**
   * The same bytes as a Node stream, for a server that pipes them to a socket with no effect per
   * chunk: it ends only once every byte arrived and the read was checked (the process's exit,
   * the size), and is destroyed with the refusal (a `SandboxFileError` or `DriverFailure`)
   * otherwise. Read `stream` or this, never both.
   */
  readonly readable: Readable
  /**
   * A file of known size only: its bytes sent to `socket` by the kernel instead (`Driver/Splice.ts`),
   * after those already read; use this or `stream`/`readable`, never both. Completes once every
   * byte is in the socket and the read was checked (the process's exit, the size); fails with the
   * refusal, or `SpliceFailed` when the connection went (reset, idle for `idleMs`).
   */
  readonly spliceTo?: (
    socket: Net.Socket,
    idleMs: number
  ) => Effect.Effect<void, SandboxFileError | DriverFailure | SpliceFailed>
}

/**
 * An upload whose bytes the kernel splices from a connection into the sandbox (`Driver/Splice.ts`),
 * never through this process. `begin` answers the connection's request once the sandbox is ready
 * to receive (the data plane's 101) and hands back what Node had read of it ahead; from then on
 * nothing here reads or writes the connection until the upload ends. `cut` is the failure when
 * the connection ends badly (reset, nothing moved for `idleMs`). No byte bound but the disk's.
 */
export interface SplicedBody<E> {
  readonly socket: Net.Socket
  readonly idleMs: number
  readonly begin: Effect.Effect<ReadonlyArray<Uint8Array>, E>
  readonly cut: (cause: unknown) => E
}

/**
 * An upload's body as a Node stream (a server's request), piped into the sandbox with no effect
 * per chunk; `cut` is the failure when it ends before its end or fails (the client went away).
 */
export interface ReadableBody<E> {
  readonly readable: Readable
  readonly cut: (cause: unknown) => E
}

export class SandboxStats extends Schema.Class<SandboxStats>("@svc/host/SandboxStats")({
  memoryBytes: Schema.Int,
  cpuUsageNs: Schema.optionalKey(Schema.Int),
  pids: Schema.Int,
  /**
   * Bytes the sandbox sent and received over its network link since this run started (its
   * veth's counters, read on the host side: what the sandbox cannot reset). Every byte of its
   * own traffic, to the egress proxy and from the exposed ports' proxy alike.
   */
  netBytesOut: Schema.optionalKey(Schema.Int),
  netBytesIn: Schema.optionalKey(Schema.Int),
  /** Its memory limit (`ramMb`), in bytes. */
  memoryLimitBytes: Schema.optionalKey(Schema.Int),
  /**
   * What its disk holds on the host: the blocks its sparse disk image has allocated (blocks freed
   * inside are not given back), absent for a sandbox without an image.
   */
  diskBytes: Schema.optionalKey(Schema.Int),
  /** Its disk's size (`diskGb`), in bytes. */
  diskLimitBytes: Schema.optionalKey(Schema.Int)
}) {}

/** How a run ended on its own (its init died) rather than by `stop`. */
export class SandboxExit extends Schema.Class<SandboxExit>("@svc/host/SandboxExit")({
  sandboxId: DriverSandboxId,
  /** The init's exit status as bubblewrap saw it (128 + n: ended by signal n); absent when none was recorded. */
  exitCode: Schema.optionalKey(Schema.Int),
  /** The memory cgroup's OOM killer ended processes of the sandbox during the run, the init included. */
  outOfMemory: Schema.Boolean,
  /** For people: `out of memory at ram_mb 256`, `killed by signal 9`, `exited with code 3`. */
  reason: Schema.String,
  /** When the driver found the run ended (ISO 8601). */
  endedAt: Schema.String
}) {}

export const RunStatus = Schema.Literals(["running", "stopped"])
export type RunStatus = typeof RunStatus.Type

/** One sandbox this host has on disk, for the agent's reconcile after a restart. */
export class SandboxListing extends Schema.Class<SandboxListing>("@svc/host/SandboxListing")({
  sandboxId: DriverSandboxId,
  status: RunStatus,
  internalIp: Schema.String,
  pid: Schema.optionalKey(Schema.Int),
  startedAt: Schema.optionalKey(Schema.String),
  createdAt: Schema.String,
  template: Schema.String
}) {}

// ---------------------------------------------------------------------------------------------
// Processes: streamed exec and background processes (`Driver/Processes.ts`)

/** One event of a streamed command: a chunk of its output, or how it ended (the last event). */
export type ProcessEvent =
  | { readonly _tag: "Output"; readonly stream: "stdout" | "stderr"; readonly bytes: Uint8Array }
  | {
    readonly _tag: "Exit"
    readonly exitCode: number
    readonly durationMs: number
    /** Why it ended (background processes): see `ProcessEndReason`. */
    readonly reason?: ProcessEndReason
  }

/**
 * `exited`: it ended on its own; `killed`: a signal ended it (its exit code is 128 + the
 * signal); `sandbox_stopped`: its sandbox stopped (or was deleted) under it.
 */
export const ProcessEndReason = Schema.Literals(["exited", "killed", "sandbox_stopped"])
export type ProcessEndReason = typeof ProcessEndReason.Type

export const ProcessSignal = Schema.Literals(["INT", "TERM", "KILL", "HUP"])
export type ProcessSignal = typeof ProcessSignal.Type

export class ProcessRequest extends Schema.Class<ProcessRequest>("@svc/host/ProcessRequest")({
  cmd: DriverExecRequest.fields.cmd,
  cwd: Schema.optionalKey(SandboxPath),
  user: Schema.optionalKey(SandboxUser),
  env: Schema.optionalKey(Env),
  /** Keep its stdin open for `processStdin`; otherwise it reads end of file at once. */
  stdin: Schema.Boolean
}) {}

/** A background process: `pid` as the sandbox sees it. */
export class ProcessInfo extends Schema.Class<ProcessInfo>("@svc/host/ProcessInfo")({
  pid: Schema.Int,
  cmd: Schema.Array(Schema.String),
  state: Schema.Literals(["running", "exited"]),
  exitCode: Schema.NullOr(Schema.Int),
  /** ISO 8601. */
  startedAt: Schema.String,
  exitedAt: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(ProcessEndReason)
}) {}

// ---------------------------------------------------------------------------------------------
// Terminal (`Driver/Pty.ts`)

export class PtyRequest extends Schema.Class<PtyRequest>("@svc/host/PtyRequest")({
  cols: PositiveInt(1000),
  rows: PositiveInt(1000),
  cmd: Schema.optionalKey(DriverExecRequest.fields.cmd),
  env: Schema.optionalKey(Env)
}) {}

/** A terminal in a sandbox: bytes both ways, resize, and the exit code. Lives as long as its scope. */
export interface PtySession {
  readonly output: Stream.Stream<Uint8Array, SandboxDriverError>
  write(bytes: Uint8Array): Effect.Effect<void, SandboxDriverError>
  resize(cols: number, rows: number): Effect.Effect<void, SandboxDriverError>
  /** Completes with the shell's exit code once it ends. */
  readonly exit: Effect.Effect<number, SandboxDriverError>
}

// ---------------------------------------------------------------------------------------------
// Errors

export class InvalidSandboxRequest extends Schema.TaggedError<InvalidSandboxRequest>()(
  "InvalidSandboxRequest",
  { message: Schema.String }
) {}

export class SandboxNotFound extends Schema.TaggedError<SandboxNotFound>()("SandboxNotFound", {
  sandboxId: Schema.String
}) {}

export class SandboxAlreadyExists extends Schema.TaggedError<SandboxAlreadyExists>()("SandboxAlreadyExists", {
  sandboxId: Schema.String
}) {}

export class SandboxNotRunning extends Schema.TaggedError<SandboxNotRunning>()("SandboxNotRunning", {
  sandboxId: Schema.String
}) {}

export class TemplateNotFound extends Schema.TaggedError<TemplateNotFound>()("TemplateNotFound", {
  template: Schema.String
}) {}

export class SandboxCapacityExhausted extends Schema.TaggedError<SandboxCapacityExhausted>()(
  "SandboxCapacityExhausted",
  { message: Schema.String }
) {}

export const FileErrorReason = Schema.Literals([
  "not_found",
  "is_directory",
  "not_directory",
  "not_regular_file",
  "too_large",
  /** Under /proc or /sys, however the path got there (links included): refused by every file operation. */
  "kernel_interface",
  /** The sandbox's kernel refused the operation (`errno` names why: ENOSPC, EIO, EROFS...). */
  "refused",
  /** An upload (a file, an archive) found the sandbox's disk full (ENOSPC, EDQUOT); none of it is kept. */
  "no_space",
  /** mkdir, move or remove found the target in the way (it exists, or a folder is not empty). */
  "conflict",
  /** A move of a folder into itself, a removal of `/`. */
  "invalid",
  "failed"
])

export class SandboxFileError extends Schema.TaggedError<SandboxFileError>()("SandboxFileError", {
  sandboxId: Schema.String,
  path: Schema.String,
  reason: FileErrorReason,
  message: Schema.String,
  /** With `refused`: the error's symbolic name (`ENOSPC`), when the kernel's message names one. */
  errno: Schema.optionalKey(Schema.String)
}) {}

/**
 * A background process refused: `not_found` (no such pid of this sandbox), `exited` (stdin or
 * a signal for a process that has ended), `limit` (the sandbox runs as many as allowed).
 */
export class ProcessRefused extends Schema.TaggedError<ProcessRefused>()("ProcessRefused", {
  sandboxId: Schema.String,
  reason: Schema.Literals(["not_found", "exited", "limit"]),
  message: Schema.String
}) {}

export class DriverUnsupported extends Schema.TaggedError<DriverUnsupported>()("DriverUnsupported", {
  operation: Schema.String,
  message: Schema.String
}) {}

/** The host failed (a command, a file, the kernel refused): not the caller's fault. */
export class DriverFailure extends Schema.TaggedError<DriverFailure>()("DriverFailure", {
  operation: Schema.String,
  message: Schema.String
}) {}

export type SandboxDriverError =
  | InvalidSandboxRequest
  | SandboxNotFound
  | SandboxAlreadyExists
  | SandboxNotRunning
  | TemplateNotFound
  | SandboxCapacityExhausted
  | SandboxFileError
  | ProcessRefused
  | DriverUnsupported
  | DriverFailure

type Common = InvalidSandboxRequest | SandboxNotFound | DriverFailure

// ---------------------------------------------------------------------------------------------
// The service

export class SandboxDriver extends Context.Service<SandboxDriver, {
  /** Makes the sandbox's file system (copy-on-write over the template) and starts it. */
  create(
    spec: SandboxSpec
  ): Effect.Effect<
    SandboxInfo,
    InvalidSandboxRequest | SandboxAlreadyExists | TemplateNotFound | SandboxCapacityExhausted | DriverFailure
  >
  /**
   * Gives a running sandbox made for later use (a host's warm pool entry) the identity and
   * settings of `spec`: its id (files, cgroups, hostname, address lease), env, cpu and memory
   * limits, exposed ports. The template must be the one it was made from. Not atomic across a
   * crash: a half-adopted sandbox is found under `spec.sandboxId` or `fromId` and `destroy` of
   * either id removes everything of it.
   */
  adopt(
    fromId: string,
    spec: SandboxSpec
  ): Effect.Effect<SandboxInfo, Common | SandboxNotRunning | SandboxAlreadyExists>
  /** Starts a stopped sandbox again from its saved file system; a running one is left as is. */
  start(sandboxId: string): Effect.Effect<SandboxInfo, Common>
  /** Ends every process of the sandbox and keeps its file system. Idempotent. */
  stop(sandboxId: string): Effect.Effect<void, Common>
  /** Removes processes, network, cgroups and files. Idempotent: an unknown id succeeds. */
  destroy(sandboxId: string): Effect.Effect<void, InvalidSandboxRequest | DriverFailure>
  exec(sandboxId: string, request: DriverExecRequest): Effect.Effect<DriverExecResult, Common | SandboxNotRunning>
  readFile(
    sandboxId: string,
    path: string,
    options?: { readonly maxBytes?: number }
  ): Effect.Effect<Uint8Array, Common | SandboxNotRunning | SandboxFileError>
  /** Writes (creating parent folders) up to 100 MiB; `mode` defaults to 0644. */
  writeFile(
    sandboxId: string,
    path: string,
    bytes: Uint8Array,
    mode?: number
  ): Effect.Effect<void, Common | SandboxNotRunning | SandboxFileError>
  /**
   * A file's bytes as a stream, never held whole: refusals (missing, a folder, too large,
   * unreadable) fail the effect before any byte; the stream fails if the file changes size
   * while it is read. The reading processes live as long as the scope.
   */
  readFileStream(
    sandboxId: string,
    path: string,
    options?: { readonly maxBytes?: number }
  ): Effect.Effect<FileReadStream, Common | SandboxNotRunning | SandboxFileError, Scope.Scope>
  /**
   * Writes `body` to the file, streaming (at most `maxBytes`, default 100 MiB: more is
   * `too_large`). A regular file is replaced only once the whole body arrived (it is written
   * next to its target and renamed over it: a cut transfer leaves the old file); a device or
   * a kernel interface (/proc) is written in place and its mode left alone.
   */
  writeFileStream<E, R>(
    sandboxId: string,
    path: string,
    body: Stream.Stream<Uint8Array, E, R> | ReadableBody<E> | SplicedBody<E>,
    options?: { readonly mode?: number; readonly maxBytes?: number; readonly parents?: boolean }
  ): Effect.Effect<void, E | Common | SandboxNotRunning | SandboxFileError, R>
  listDir(
    sandboxId: string,
    path: string
  ): Effect.Effect<ReadonlyArray<DirEntry>, Common | SandboxNotRunning | SandboxFileError>
  /** Does not follow a final symlink (reports `symlink`). */
  stat(sandboxId: string, path: string): Effect.Effect<FileStat, Common | SandboxNotRunning | SandboxFileError>
  /** The entry at `path` (a final symlink not followed), as GET .../files/stat shows it. */
  fileInfo(sandboxId: string, path: string): Effect.Effect<FileInfo, Common | SandboxNotRunning | SandboxFileError>
  /** Makes a folder; `created` false when `parents` found it there already (else `conflict`). */
  makeDir(
    sandboxId: string,
    path: string,
    options: { readonly parents: boolean; readonly mode: number }
  ): Effect.Effect<
    { readonly created: boolean; readonly info: FileInfo },
    Common | SandboxNotRunning | SandboxFileError
  >
  /** Renames `from` to `to` (a link moved as a link); `to` in the way is `conflict` unless `overwrite`. */
  move(
    sandboxId: string,
    from: string,
    to: string,
    options: { readonly overwrite: boolean }
  ): Effect.Effect<FileInfo, Common | SandboxNotRunning | SandboxFileError>
  /** Removes the entry (a link, not its target); a folder with entries needs `recursive` (else `conflict`). */
  remove(
    sandboxId: string,
    path: string,
    options: { readonly recursive: boolean }
  ): Effect.Effect<void, Common | SandboxNotRunning | SandboxFileError>
  /**
   * The folder at `path` as a tar (`tar.gz`: gzipped inside the sandbox) stream, `/proc` and
   * `/sys` left out; a missing path or a file fails before any byte.
   */
  readArchive(
    sandboxId: string,
    path: string,
    format: "tar" | "tar.gz"
  ): Effect.Effect<FileStream, Common | SandboxNotRunning | SandboxFileError, Scope.Scope>
  /**
   * Extracts the tar (or tar.gz) `body` under `path`, made with its parents: every entry, or
   * (refused, cut, a full disk) nothing. An entry that would land outside `path` (`..`, an
   * absolute name, through a symlink, a hard link out) or a device node is `invalid` before
   * anything is written.
   */
  writeArchive<E, R>(
    sandboxId: string,
    path: string,
    body: Stream.Stream<Uint8Array, E, R>,
    format: "tar" | "tar.gz"
  ): Effect.Effect<{ readonly entries: number }, E | Common | SandboxNotRunning | SandboxFileError, R>
  /**
   * The changes under `path` (`recursive`: in every folder below it) from once the watch is in
   * place, by a watcher inside the sandbox: at most `MAX_QUEUED` events wait for the reader, past
   * that a last `overflow` and the end. Ends when the folder goes or the sandbox stops.
   */
  watch(
    sandboxId: string,
    path: string,
    options: { readonly recursive: boolean }
  ): Effect.Effect<Stream.Stream<FileWatchEvent>, Common | SandboxNotRunning | SandboxFileError, Scope.Scope>
  stats(sandboxId: string): Effect.Effect<SandboxStats, Common | SandboxNotRunning>
  /**
   * Where this host reaches `port` of a running sandbox, for the proxy of exposed ports: only a
   * port the sandbox was created with in `exposedPorts` (any other is `InvalidSandboxRequest`).
   */
  portAddress(
    sandboxId: string,
    port: number
  ): Effect.Effect<{ readonly host: string; readonly port: number }, Common | SandboxNotRunning>
  /**
   * How the sandbox's last run ended, when it ended on its own (its init died: out of memory,
   * killed, exited) rather than by `stop`; undefined while it runs, after a stop and before its
   * first start. The first call that finds a run ended also ends what is left of it (processes,
   * cgroups, network; the file system stays) and records how it ended until the next start or
   * stop. Cheap for a running sandbox (its processes' /proc entries only): meant to be polled.
   */
  ended(sandboxId: string): Effect.Effect<SandboxExit | undefined, Common>
  /**
   * The loop device each volume of a running sandbox is mounted from, by volume id (volumes
   * whose device is not found are left out).
   */
  volumeDevices(sandboxId: string): Effect.Effect<Readonly<Record<string, string>>, Common | SandboxNotRunning>
  /**
   * Removes a deleted volume's storage on this host (a local volume's image, or a shared one's
   * machine-wide mount and image). Idempotent: nothing there succeeds.
   */
  removeVolume(volumeId: string, type: "local" | "shared"): Effect.Effect<void, InvalidSandboxRequest | DriverFailure>
  /** Which limits this host enforces (probed once, when the driver starts). */
  readonly hostLimits: HostLimits
  /** Every sandbox this host has on disk with its run status. */
  readonly list: Effect.Effect<ReadonlyArray<SandboxListing>, DriverFailure>
  /**
   * A terminal in the running sandbox (its identity, filter and limits, on a terminal of its own
   * devpts): lives as long as the scope, which hangs it up and ends its processes.
   */
  pty(
    sandboxId: string,
    request: PtyRequest
  ): Effect.Effect<PtySession, Common | SandboxNotRunning | DriverUnsupported, Scope.Scope>
  /**
   * The template name of an image root on this host, made when absent (`debian`: built with
   * mmdebstrap the first time, see `Debian.ts`; `log` hears its progress).
   */
  prepareRoot(root: ImageRoot, log?: (line: string) => void): Effect.Effect<string, DriverFailure>
  /** Whether the layer is extracted on this host. */
  hasLayer(digest: string): Effect.Effect<boolean, InvalidSandboxRequest | DriverFailure>
  /**
   * Extracts a layer tar (verified against `digest` first) for sandboxes to stack. With
   * `digestChecked` the caller computed `digest` over the file's bytes as it wrote them (a build's
   * own layer, a pulled image's converted one): not hashed a second time.
   */
  importLayer(
    digest: string,
    file: string,
    options?: { readonly digestChecked?: boolean }
  ): Effect.Effect<void, InvalidSandboxRequest | DriverFailure>
  /**
   * A layer extracted as its tar arrives (a pulled image's): put in place only by `commit` with
   * the digest the caller verified, dropped by `abort` (`ImageLayers.beginLayerImport`).
   */
  readonly beginLayerImport: Effect.Effect<LayerImport, DriverFailure>
  /** Removes an extracted layer (sandboxes made from it keep their mount until they stop). */
  removeLayer(digest: string): Effect.Effect<void, InvalidSandboxRequest | DriverFailure>
  /** The image layers extracted on this host (not fork snapshots: `sweepForkLayers` keeps those). */
  readonly layers: Effect.Effect<ReadonlyArray<string>, DriverFailure>
  /** The roots made on this host besides `base` (`debian` once its root is extracted here). */
  readonly roots: Effect.Effect<ReadonlyArray<ImageRoot>, DriverFailure>
  /**
   * Writes a tar of a running sandbox's writable layer (what it changed over its image) to the
   * host file `file`: owners as inside, whiteouts kept. Its sha256 names the new layer.
   */
  exportLayer(sandboxId: string, file: string): Effect.Effect<void, Common | SandboxNotRunning>
  /**
   * Copies a running sandbox's writable layer into the extracted layer `digest` (a name chosen
   * by the caller, not a content digest), for forks to stack (`SandboxSpec.forkOf`). A layer of
   * that name present already is kept (a repeated call). Fork layers no sandbox stacks are
   * removed by `sweepForkLayers`.
   */
  snapshotLayer(sandboxId: string, digest: string): Effect.Effect<void, Common | SandboxNotRunning>
  /** Removes the fork layers no sandbox on this host stacks, made more than `graceMs` ago; their names. */
  sweepForkLayers(graceMs: number): Effect.Effect<ReadonlyArray<string>, DriverFailure>
  /**
   * Runs a command like `exec`, its output as it comes: `Output` events, then one `Exit`. The
   * command lives as long as the scope (closed early, every process of it is killed). Outputs
   * are not capped (they are not held).
   */
  execStream(
    sandboxId: string,
    request: DriverExecRequest
  ): Effect.Effect<Stream.Stream<ProcessEvent>, Common | SandboxNotRunning, Scope.Scope>
  /**
   * Starts a background process: it outlives the call, its output is kept (the last 1 MiB of
   * each stream), it ends with its sandbox (`sandbox_stopped`). Exited ones are kept for a while.
   */
  startProcess(
    sandboxId: string,
    request: ProcessRequest
  ): Effect.Effect<ProcessInfo, Common | SandboxNotRunning | ProcessRefused>
  /** The sandbox's background processes, newest first (running, and exited ones kept). */
  processes(sandboxId: string): Effect.Effect<ReadonlyArray<ProcessInfo>, InvalidSandboxRequest>
  process(sandboxId: string, pid: number): Effect.Effect<ProcessInfo, InvalidSandboxRequest | ProcessRefused>
  /**
   * Its output kept so far as events (stdout and stderr in the order they came, then `Exit` if it
   * has ended); with `follow`, also what comes after, until it exits.
   */
  processOutput(
    sandboxId: string,
    pid: number,
    follow: boolean
  ): Effect.Effect<Stream.Stream<ProcessEvent>, InvalidSandboxRequest | ProcessRefused>
  /** Writes to its stdin (opened with `stdin: true`); `close` ends it (end of file) after. */
  processStdin<E, R>(
    sandboxId: string,
    pid: number,
    body: Stream.Stream<Uint8Array, E, R>,
    close: boolean
  ): Effect.Effect<void, E | InvalidSandboxRequest | ProcessRefused, R>
  /** INT, TERM, HUP go to the process; KILL ends it and every process it started. */
  signalProcess(
    sandboxId: string,
    pid: number,
    signal: ProcessSignal
  ): Effect.Effect<void, InvalidSandboxRequest | ProcessRefused>
}>()("@svc/host/Driver/SandboxDriver") {}

/** Limits the file API enforces (the API's PUT body cap). */
/** One change a watch reports (`Driver/Watches.ts`). */
export interface FileWatchEvent {
  readonly type: "create" | "modify" | "delete" | "move" | "overflow"
  readonly path: string
  readonly isDir: boolean
  /** A move's old path; null otherwise. */
  readonly from: string | null
}

export const MAX_FILE_BYTES = 100 * 1024 * 1024
export const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
