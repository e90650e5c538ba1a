/**
 * The file API (`readFile`, `writeFile`, their streaming forms, `stat`, `listDir`) as small
 * busybox scripts run through the exec path, inside the sandbox where `/` is the sandbox root:
 * `..`, absolute symlinks and `/proc/1/root` all resolve within the sandbox and never reach the
 * host's files, which the agent would risk by opening paths under the sandbox's folder from the
 * host side.
 *
 * Transfers stream: a read is `head` on the file piped out, a write is `cat` into a file next to
 * its target, renamed over it by a second script once every byte arrived (so neither a cut
 * upload nor a killed agent leaves a half-written file). Nothing holds a whole file in memory.
 */
import * as NodeStream from "@effect/platform-node/NodeStream"
import { descriptorOf, stopReading } from "@svc/host-protocol/Handoff"
import { Effect, Stream } from "effect"
import { randomBytes } from "node:crypto"
import type * as Net from "node:net"
import * as Posix from "node:path/posix"
import { Readable, Transform, type Writable } from "node:stream"
import {
  DirEntry,
  DriverFailure,
  type EntryType,
  FileInfo,
  FileMode,
  type FileReadStream,
  FileStat,
  MAX_FILE_BYTES,
  type ReadableBody,
  SandboxFileError,
  SandboxPath,
  type SplicedBody
} from "../Driver.ts"
import type { Exec } from "./Exec.ts"
import { decodeInput, type DriverHost, HELPER, invalid, type RunningSandbox, SANDBOX_PATH } from "./Host.ts"
import { awaitData, type CommandOptions, decode, type ProcessExit, pump, pumpReadable, readHeader } from "./Process.ts"
import { spliceFds, spliceInto, writeAll } from "./Splice.ts"

// Each script exits with one of these codes to name its refusal.
const FILE_EXIT: Record<number, SandboxFileError["reason"]> = {
  3: "not_found",
  4: "is_directory",
  5: "not_regular_file",
  6: "too_large",
  7: "not_directory",
  10: "kernel_interface",
  11: "conflict",
  12: "invalid"
}
/** The file operation itself failed inside: the kernel's message on stderr names why. */
const REFUSED_EXIT = 9

/**
 * Refuses (exit 10) a path that reaches /proc or /sys (docs/security.md#sandbox-identity): their
 * files hold what a read-only key must not read (every process's environ, the injected key).
 * The API refuses the path's text; this is the walk the kernel would do, done here so that links
 * made inside the sandbox (`ln -s /proc /tmp/p`, `/tmp/q -> ../proc`) cannot dodge it: one
 * component at a time, each link's own target walked in turn (never `readlink -f`, which would
 * follow /proc's magic links out again), refused as soon as the walk stands in /proc or /sys,
 * then the file system of the deepest existing folder of the result (a proc or sysfs elsewhere).
 * Sets `r`: the path with every link resolved (a trailing slash kept). Links swapped after this
 * check are the sandbox's own doing: the operations below then use `r` where they can.
 */
const GUARD = `
r=
n=0
rest=$1
while [ -n "$rest" ]; do
  c=\${rest%%/*}
  case "$rest" in */*) rest=\${rest#*/};; *) rest=;; esac
  case "$c" in ''|.) continue;; ..) r=\${r%/*}; continue;; esac
  if [ -L "$r/$c" ]; then
    n=$((n+1))
    [ $n -gt 40 ] && { echo 'Too many levels of symbolic links' >&2; exit ${REFUSED_EXIT}; }
    t=$("$B" readlink -- "$r/$c") || exit 3
    case "$t" in /*) r=;; esac
    rest=$t/$rest
    continue
  fi
  r=$r/$c
  case "$r" in /proc|/proc/*|/sys|/sys/*) exit 10;; esac
done
r=\${r:-/}
case "$1" in */) r=\${r%/}/;; esac
a=$r
while [ ! -e "$a" ]; do a=\${a%/*}; [ -z "$a" ] && a=/; done
case "$("$B" stat -f -c %T -- "$a")" in proc|sysfs) exit 10;; esac
`

/** GUARD for the scripts of other modules (`Archives.ts`, `Watches.ts`): sets `r` from `$1`. */
export const GUARD_SCRIPT = GUARD

/**
 * Prints the file's size and a newline, then its bytes: exactly that many (a file that grows
 * meanwhile is cut there), or for files that report no size up to one byte more than
 * allowed, whose arrival tells a file over the limit apart. A sized file goes in `dd` blocks of
 * 1 MiB and one of the rest: busybox's `head -c` writes 4 KiB at a time, and each write reached
 * the agent and the API as a chunk of its own (a 1 GiB download ran at 15-30 MiB/s).
 */
const READ_SCRIPT = `
B=${HELPER}
${GUARD}
p=$r
[ -e "$p" ] || exit 3
[ -d "$p" ] && exit 4
[ -f "$p" ] || exit 5
s=$("$B" stat -L -c %s -- "$p") || exit ${REFUSED_EXIT}
[ "$s" -gt "$2" ] && exit 6
printf '%s\\n' "$s"
if [ "$s" -gt 0 ]; then
  q=$((s / 1048576)); m=$((s % 1048576))
  { "$B" dd bs=1048576 count=$q 2>/dev/null && { [ $m -eq 0 ] || "$B" dd bs=$m count=1 2>/dev/null; }; } < "$p" ||
    exit ${REFUSED_EXIT}
else
  "$B" head -c "$(($2 + 1))" -- "$p" || exit ${REFUSED_EXIT}
fi
`

/**
 * Receives an upload on stdin (args: path, temp name, parents 1/0: make missing folders, else
 * exit 3). /proc and /sys are refused (GUARD). A device or fifo is written
 * in place (and announced with a lone NUL). Anything else goes to `$2`, a fresh name in the
 * folder of the resolved target, announced as "<target>\\0<temp>\\0" before the first byte is read; the
 * commit script renames it over the target once the driver saw every byte through.
 */
const RECEIVE_SCRIPT = `
B=${HELPER}
p=$1
case "$p" in */) exit 4;; esac
${GUARD}
d=\${p%/*}
[ -z "$d" ] && d=/
[ -d "$p" ] && exit 4
if [ ! -d "$d" ]; then
  [ -e "$d" ] && exit 7
  [ "$3" = 1 ] || exit 3
  "$B" mkdir -p -- "$d" || exit 8
fi
if [ -e "$p" ] && [ ! -f "$p" ]; then
  printf '\\0'
  "$B" cat > "$p" || exit ${REFUSED_EXIT}
  exit 0
fi
if [ -L "$p" ] || [ -e "$p" ]; then
  t=$("$B" readlink -f -- "$p") || exit 7
else
  t=$("$B" readlink -f -- "$d") || exit 7
  t=\${t%/}/\${p##*/}
fi
[ -d "$t" ] && exit 4
tmp=\${t%/*}/$2
printf '%s\\0%s\\0' "$t" "$tmp"
"$B" cat > "$tmp" || exit ${REFUSED_EXIT}
`

/** Gives the received file its mode and puts it in place. */
const COMMIT_SCRIPT = `
B=${HELPER}
"$B" chmod "$3" "$1" || exit ${REFUSED_EXIT}
"$B" mv -f "$1" "$2" || exit ${REFUSED_EXIT}
`

const STAT_SCRIPT = `
B=${HELPER}
${GUARD}
p=$1
[ -e "$p" ] || [ -L "$p" ] || exit 3
"$B" stat -c '%f %s %Y' -- "$p"
`

/** One record per entry: "<hex mode> <size> <mtime> <name>\\0" (names may hold newlines). */
const LIST_SCRIPT = `
B=${HELPER}
${GUARD}
p=$r
[ -d "$p" ] || { [ -e "$p" ] && exit 7; exit 3; }
cd -- "$p" || exit 1
n=0
for f in .* *; do
  [ "$f" = . ] || [ "$f" = .. ] && continue
  [ -e "$f" ] || [ -L "$f" ] || continue
  s=$("$B" stat -c '%f %s %Y' -- "$f") || continue
  printf '%s %s\\0' "$s" "$f"
  n=$((n+1))
  [ $n -ge ${10_000} ] && break
done
exit 0
`

// ---------------------------------------------------------------------------------------------
// stat, mkdir, move, remove (GET .../files/stat, POST .../files/mkdir|move, DELETE .../files)

/**
 * GUARD as a function, then `at`: sets `p` to the path with its folder's links resolved and its
 * own last name kept (the entry itself, a link not followed), after GUARD refused the whole path
 * (a link into /proc included: every files route refuses it). Paths come normalized (no
 * trailing slash, no `.`/`..`).
 */
const AT = `
guard() {
${GUARD}
}
at() {
  guard "$1"
  case "$1" in /) p=/; return;; esac
  d=\${1%/*}
  guard "\${d:-/}"
  p=\${r%/}/\${1##*/}
  case "$p" in /proc|/proc/*|/sys|/sys/*) exit 10;; esac
}
`

/** "<hex mode> <size> <uid> <gid> <mtime>\n" then, for a link, its target. */
const INFO_SCRIPT = `
B=${HELPER}
${AT}
at "$1"
[ -e "$p" ] || [ -L "$p" ] || exit 3
"$B" stat -c '%f %s %u %g %Y' -- "$p" || exit ${REFUSED_EXIT}
if [ -L "$p" ]; then "$B" readlink -- "$p" || exit ${REFUSED_EXIT}; fi
exit 0
`

/** Args: path, parents (1/0), mode (octal). Prints "created" or "existed". */
const MKDIR_SCRIPT = `
B=${HELPER}
${AT}
at "$1"
if [ -e "$p" ] || [ -L "$p" ]; then
  [ "$2" = 1 ] && [ -d "$p" ] && { echo existed; exit 0; }
  exit 11
fi
if [ "$2" = 1 ]; then
  "$B" mkdir -p -- "$p" || exit 8
else
  d=\${p%/*}
  [ -d "\${d:-/}" ] || { [ -e "\${d:-/}" ] && exit 7; exit 3; }
  "$B" mkdir -- "$p" || exit ${REFUSED_EXIT}
fi
"$B" chmod "$3" -- "$p" || exit ${REFUSED_EXIT}
echo created
`

/** Args: from, to, overwrite (1/0). A folder in the way is replaced whole with overwrite. */
const MOVE_SCRIPT = `
B=${HELPER}
${AT}
at "$1"
s=$p
at "$2"
t=$p
[ -e "$s" ] || [ -L "$s" ] || exit 3
[ "$s" = / ] && exit 12
d=\${t%/*}
[ -d "\${d:-/}" ] || { [ -e "\${d:-/}" ] && exit 7; exit 3; }
[ "$s" = "$t" ] && exit 0
if [ -d "$s" ] && [ ! -L "$s" ]; then
  case "$t/" in "$s"/*) echo 'a folder cannot move into itself' >&2; exit 12;; esac
fi
if [ -e "$t" ] || [ -L "$t" ]; then
  [ "$3" = 1 ] || exit 11
  "$B" rm -rf -- "$t" || exit ${REFUSED_EXIT}
fi
"$B" mv -f -- "$s" "$t" || exit ${REFUSED_EXIT}
`

/** Args: path, recursive (1/0). */
const REMOVE_SCRIPT = `
B=${HELPER}
${AT}
at "$1"
[ "$p" = / ] && exit 12
[ -e "$p" ] || [ -L "$p" ] || exit 3
if [ -d "$p" ] && [ ! -L "$p" ]; then
  if [ "$2" = 1 ]; then
    "$B" rm -rf -- "$p" || exit ${REFUSED_EXIT}
  else
    [ -n "$("$B" ls -A -- "$p")" ] && exit 11
    "$B" rmdir -- "$p" || exit ${REFUSED_EXIT}
  fi
else
  "$B" rm -f -- "$p" || exit ${REFUSED_EXIT}
fi
`

/** Lexically normal: no trailing slash, no `.` or `..` segment (the API refuses `..` already). */
const normalize = (path: string) => {
  const n = Posix.normalize(path)
  return n.length > 1 && n.endsWith("/") ? n.slice(0, -1) : n
}

const FILE_OP_TIMEOUT_MS = 60_000
/** A transfer's processes end after this long whatever happens (the API waits as long). */
export const TRANSFER_TIMEOUT_MS = 600_000
const NUL = 0
const NEWLINE = 10
const MAX_HEADER_BYTES = 2 * 4096 + 64

/** The kernel's messages (strerror, busybox's own wording) by the error's symbolic name. */
const ERRNO_MESSAGES: ReadonlyArray<readonly [string, RegExp]> = [
  ["ENOSPC", /No space left on device/i],
  ["EDQUOT", /Disk quota exceeded/i],
  ["EIO", /Input\/output error/i],
  ["EPERM", /Operation not permitted/i],
  ["EACCES", /Permission denied/i],
  ["EROFS", /Read-only file system/i],
  ["EFBIG", /File too large/i],
  ["ETXTBSY", /Text file busy/i],
  ["EBUSY", /Device or resource busy/i],
  ["ENXIO", /No such device or address/i],
  ["ENODEV", /No such device/i],
  ["EINVAL", /Invalid argument/i],
  ["EFAULT", /Bad address/i],
  ["ELOOP", /Too many levels of symbolic links/i],
  ["ENAMETOOLONG", /File name too long/i],
  ["ENOMEM", /Cannot allocate memory/i],
  ["EMFILE", /Too many open files/i],
  ["EAGAIN", /Resource temporarily unavailable/i],
  ["EOPNOTSUPP", /Operation not supported/i],
  ["EOVERFLOW", /Value too large/i],
  ["ENOTDIR", /Not a directory/i],
  ["EISDIR", /Is a directory/i],
  ["ENOENT", /No such file or directory|nonexistent directory/i]
]

/** The symbolic name and message of the kernel error the last line of `stderr` reports. */
export const errnoOf = (stderr: string): { readonly errno: string; readonly message: string } | undefined => {
  const lines = stderr.trim().split("\n").reverse()
  for (const line of lines) {
    for (const [errno, pattern] of ERRNO_MESSAGES) {
      const match = pattern.exec(line)
      if (match) return { errno, message: match[0] }
    }
  }
  return undefined
}

const typeOfMode = (mode: number): EntryType => {
  switch (mode & 0o170000) {
    case 0o100000:
      return "file"
    case 0o040000:
      return "dir"
    case 0o120000:
      return "symlink"
    default:
      return "other"
  }
}

/** Parses "<hex mode> <size> <mtime seconds>". */
const parseStatLine = (line: string): { type: EntryType; size: number; mtime: string } | undefined => {
  const match = /^([0-9a-f]+) (\d+) (-?\d+)$/.exec(line.trim())
  if (!match) return undefined
  return {
    type: typeOfMode(parseInt(match[1]!, 16)),
    size: Number(match[2]),
    mtime: new Date(Number(match[3]) * 1000).toISOString()
  }
}

const checkPath = (path: unknown) => decodeInput(SandboxPath, path)

/** A stream's own bound: 100 MiB unless the caller names another (the data plane: none). */
const clampMax = (maxBytes: number | undefined) => Math.max(0, Math.floor(maxBytes ?? MAX_FILE_BYTES))

export const makeFiles = (host: DriverHost, exec: Pick<Exec, "runInside" | "spawnInside">) => {
  const errorsFor = (entry: RunningSandbox, path: string) => {
    const fileError = (reason: SandboxFileError["reason"], message: string, errno?: string) =>
      new SandboxFileError({
        sandboxId: entry.record.sandboxId,
        path,
        reason,
        message,
        ...(errno !== undefined ? { errno } : {})
      })
    /** A script's failed exit as the refusal it stands for. */
    const fromExit = (exit: Pick<ProcessExit, "exitCode" | "stderr" | "timedOut">) => {
      if (exit.timedOut) return fileError("failed", "timed out")
      const stderr = decode(exit.stderr).trim()
      const kernel = errnoOf(stderr)
      // 8: creating the parent folders failed; a file in the way is "not a directory".
      if (exit.exitCode === 8) {
        return kernel !== undefined && kernel.errno !== "ENOTDIR" && kernel.errno !== "EEXIST"
          ? fileError("refused", kernel.message, kernel.errno)
          : fileError("not_directory", "not_directory")
      }
      if (exit.exitCode === REFUSED_EXIT && kernel !== undefined) {
        return fileError("refused", kernel.message, kernel.errno)
      }
      const reason = FILE_EXIT[exit.exitCode] ?? "failed"
      return fileError(reason, stderr.slice(0, 500) || reason)
    }
    return { fileError, fromExit }
  }

  /** Runs a file API script; maps its exit code to the refusal it stands for. */
  const fileOp = (
    entry: RunningSandbox,
    path: string,
    script: string,
    extraArgs: ReadonlyArray<string>,
    options: Pick<CommandOptions, "stdin" | "maxOutputBytes"> = {}
  ) =>
    Effect.gen(function*() {
      // The scripts call the helper busybox by path: they work in templates without one.
      const result = yield* exec.runInside(entry, [HELPER, "sh", "-c", script, "sh", path, ...extraArgs], {
        env: { PATH: SANDBOX_PATH },
        cwd: "/",
        timeoutMs: FILE_OP_TIMEOUT_MS,
        ...options
      })
      const { fileError, fromExit } = errorsFor(entry, path)
      if (result.exitCode !== 0 || result.timedOut) return yield* fromExit(result)
      return { result, fileError }
    })

  const spawnScript = (entry: RunningSandbox, script: string, args: ReadonlyArray<string>) =>
    exec.spawnInside(entry, [HELPER, "sh", "-c", script, "sh", ...args], {
      env: { PATH: SANDBOX_PATH },
      cwd: "/",
      timeoutMs: TRANSFER_TIMEOUT_MS
    })

  const readFileStream = Effect.fn("SandboxDriver.readFileStream")(function*(
    sandboxId: string,
    path: string,
    options?: { readonly maxBytes?: number }
  ) {
    const checked = yield* checkPath(path)
    const max = clampMax(options?.maxBytes)
    const entry = yield* host.lookupRunning(sandboxId)
    const { fileError, fromExit } = errorsFor(entry, checked)
    const proc = yield* spawnScript(entry, READ_SCRIPT, [checked, String(max)])
    const header = yield* readHeader(proc.stdout, NEWLINE, 32)
    const refusal = Effect.flatMap(
      proc.exit,
      (exit) =>
        Effect.fail(
          exit.exitCode !== 0 || exit.timedOut
            ? fromExit(exit)
            : fileError("failed", "the file changed while it was read")
        )
    )
    if (header === undefined) return yield* refusal
    const size = Number(header.subarray(0, -1).toString("latin1"))
    if (!Number.isSafeInteger(size) || size < 0) return yield* fileError("failed", "unreadable size")
    // Nothing is promised to the caller before the first byte (or the end) is there: a read
    // the kernel refuses at once (EIO, EACCES) is a refusal, not a cut stream.
    if (!(yield* awaitData(proc.stdout))) {
      const exit = yield* proc.exit
      if (exit.exitCode !== 0 || exit.timedOut) return yield* fromExit(exit)
      if (size > 0) return yield* refusal
      return { size: 0, stream: Stream.empty, readable: Readable.from([]) } satisfies FileReadStream as FileReadStream
    }
    let received = 0
    const finalCheck = Effect.gen(function*() {
      const exit = yield* proc.exit
      if (exit.exitCode !== 0 || exit.timedOut) return yield* fromExit(exit)
      if (size > 0 && received !== size) return yield* fileError("failed", "the file changed while it was read")
    })
    // A plain Transform, no effect per chunk: a server pipes it straight to its socket. It ends
    // only after the checks (the read's exit, the size), and fails with the refusal otherwise.
    // Fed from the read's pipe once first read, so that until then `spliceTo` can take the pipe
    // with nothing of it in flight here.
    let piped = false
    let handedOver = false
    const readable: Transform = new Transform({
      read(size) {
        if (!piped && !handedOver) {
          piped = true
          proc.stdout.pipe(readable)
        }
        Transform.prototype._read.call(this, size)
      },
      transform(chunk: Buffer, _encoding, callback) {
        received += chunk.length
        callback(received > max ? fileError("too_large", `larger than ${max} bytes`) : null, chunk)
      },
      flush(callback) {
        Effect.runPromise(Effect.result(finalCheck)).then(
          (result) => callback(result._tag === "Failure" ? result.failure : null),
          (e) => callback(new DriverFailure({ operation: "readFile", message: String(e) }))
        )
      }
    })
    proc.stdout.once("close", () => {
      if (!handedOver && !proc.stdout.readableEnded) {
        readable.destroy(new DriverFailure({ operation: "readFile", message: "the read's output was cut" }))
      }
    })
    // The rest of a sized file spliced to a connection: what Node holds of the pipe first, then
    // the pipe's bytes by the kernel.
    const spliceTo = (socket: Net.Socket, idleMs: number) =>
      Effect.gen(function*() {
        if (piped) return yield* new DriverFailure({ operation: "readFile", message: "the file is being read already" })
        handedOver = true
        const ahead = stopReading(proc.stdout)
        readable.destroy()
        const from = descriptorOf(proc.stdout)
        const to = descriptorOf(socket)
        if (to === undefined) {
          return yield* new DriverFailure({ operation: "readFile", message: "the connection closed" })
        }
        let sent = ahead.reduce((n, c) => n + c.length, 0)
        yield* writeAll(socket, ahead)
        // No descriptor left: Node had read the pipe to its end, every byte was in hand.
        if (from !== undefined) sent += yield* spliceFds(from, to, idleMs)
        const exit = yield* proc.exit
        if (exit.exitCode !== 0 || exit.timedOut) return yield* fromExit(exit)
        if (sent !== size) return yield* fileError("failed", "the file changed while it was read")
      })
    const stream = NodeStream.fromReadable<Uint8Array, SandboxFileError | DriverFailure>({
      evaluate: () => readable,
      onError: (e) =>
        e instanceof SandboxFileError || e instanceof DriverFailure
          ? e
          : new DriverFailure({ operation: "readFile", message: String(e) })
    })
    return {
      size: size > 0 ? size : null,
      stream,
      readable,
      ...(size > 0 ? { spliceTo } : {})
    } satisfies FileReadStream as FileReadStream
  })

  const readFile = (sandboxId: string, path: string, options?: { readonly maxBytes?: number }) =>
    Effect.scoped(Effect.gen(function*() {
      // Held whole: never past 100 MiB, whatever the caller asks.
      const content = yield* readFileStream(sandboxId, path, {
        maxBytes: Math.min(options?.maxBytes ?? MAX_FILE_BYTES, MAX_FILE_BYTES)
      })
      const chunks = yield* Stream.runCollect(content.stream)
      return new Uint8Array(Buffer.concat(chunks))
    })).pipe(Effect.withSpan("SandboxDriver.readFile"))

  const writeFileStream = <E, R>(
    sandboxId: string,
    path: string,
    body: Stream.Stream<Uint8Array, E, R> | ReadableBody<E> | SplicedBody<E>,
    options?: { readonly mode?: number; readonly maxBytes?: number; readonly parents?: boolean }
  ) =>
    Effect.scoped(Effect.gen(function*() {
      const feed = (stdin: Writable, max: number) =>
        Stream.isStream(body)
          ? pump(body, stdin, max)
          : "begin" in body
          ? spliceInto(body, stdin)
          : pumpReadable(body, stdin, max)
      const checked = yield* checkPath(path)
      const fileMode = yield* decodeInput(FileMode, options?.mode ?? 0o644)
      const max = clampMax(options?.maxBytes)
      const entry = yield* host.lookupRunning(sandboxId)
      const { fileError, fromExit } = errorsFor(entry, checked)
      const proc = yield* spawnScript(entry, RECEIVE_SCRIPT, [
        checked,
        `.svc-upload-${randomBytes(8).toString("hex")}`,
        options?.parents === false ? "0" : "1"
      ])
      const refusal = Effect.flatMap(
        proc.exit,
        (exit) => Effect.fail(exit.exitCode !== 0 ? fromExit(exit) : fileError("failed", "no answer"))
      )
      const first = yield* readHeader(proc.stdout, NUL, MAX_HEADER_BYTES)
      if (first === undefined) return yield* refusal
      if (first.length > 1) {
        const second = yield* readHeader(proc.stdout, NUL, MAX_HEADER_BYTES)
        if (second === undefined) return yield* refusal
        const target = first.subarray(0, -1).toString("utf8")
        const temp = second.subarray(0, -1).toString("utf8")
        let committed = false
        // Whatever ends this write early (a refusal, a cut body, interruption): the writer is
        // killed (no clean end of its input) and its file removed.
        yield* Effect.addFinalizer(() =>
          committed ? Effect.void : Effect.andThen(
            Effect.sync(proc.kill),
            exec.runInside(entry, [HELPER, "rm", "-f", "--", temp], {
              env: { PATH: SANDBOX_PATH },
              cwd: "/",
              timeoutMs: FILE_OP_TIMEOUT_MS
            })
          ).pipe(Effect.ignore)
        )
        const result = yield* feed(proc.stdin, max)
        if (result.overLimit) return yield* fileError("too_large", `at most ${max} bytes`)
        proc.stdin.end()
        const exit = yield* proc.exit
        if (exit.exitCode !== 0 || exit.timedOut) {
          const refusal = fromExit(exit)
          // A full disk: the temp file goes (the finalizer), nothing is left under the name.
          return yield* (refusal.reason === "refused" && (refusal.errno === "ENOSPC" || refusal.errno === "EDQUOT")
            ? fileError("no_space", "the sandbox's disk is full", refusal.errno)
            : refusal)
        }
        if (result.readerGone) return yield* fileError("failed", "the writer stopped reading")
        const commit = yield* exec.runInside(entry, [
          HELPER,
          "sh",
          "-c",
          COMMIT_SCRIPT,
          "sh",
          temp,
          target,
          fileMode.toString(8)
        ], {
          env: { PATH: SANDBOX_PATH },
          cwd: "/",
          timeoutMs: FILE_OP_TIMEOUT_MS,
          maxOutputBytes: 64 * 1024
        })
        if (commit.exitCode !== 0 || commit.timedOut) return yield* fromExit(commit)
        committed = true
        return
      }
      // In place (a device, a fifo): what arrived is written, the mode is left alone.
      const result = yield* feed(proc.stdin, max)
      if (result.overLimit) return yield* fileError("too_large", `at most ${max} bytes`)
      proc.stdin.end()
      const exit = yield* proc.exit
      if (exit.exitCode !== 0 || exit.timedOut) return yield* fromExit(exit)
    })).pipe(Effect.withSpan("SandboxDriver.writeFileStream"))

  const writeFile = (sandboxId: string, path: string, bytes: Uint8Array, mode?: number) =>
    Effect.gen(function*() {
      if (!(bytes instanceof Uint8Array)) return yield* invalid("bytes must be a Uint8Array")
      if (bytes.length > MAX_FILE_BYTES) {
        const checked = yield* checkPath(path)
        return yield* new SandboxFileError({
          sandboxId,
          path: checked,
          reason: "too_large",
          message: `at most ${MAX_FILE_BYTES} bytes`
        })
      }
      return yield* writeFileStream(sandboxId, path, Stream.succeed(bytes), mode !== undefined ? { mode } : {})
    }).pipe(Effect.withSpan("SandboxDriver.writeFile"))

  const stat = Effect.fn("SandboxDriver.stat")(function*(sandboxId: string, path: string) {
    const checked = yield* checkPath(path)
    const entry = yield* host.lookupRunning(sandboxId)
    const { result, fileError } = yield* fileOp(entry, checked, STAT_SCRIPT, [], { maxOutputBytes: 4096 })
    const parsed = parseStatLine(decode(result.stdout))
    if (parsed === undefined) return yield* fileError("failed", "unreadable stat output")
    return new FileStat(parsed)
  })

  const listDir = Effect.fn("SandboxDriver.listDir")(function*(sandboxId: string, path: string) {
    const checked = yield* checkPath(path)
    const entry = yield* host.lookupRunning(sandboxId)
    const { result } = yield* fileOp(entry, checked, LIST_SCRIPT, [], { maxOutputBytes: 16 * 1024 * 1024 })
    const entries: Array<DirEntry> = []
    for (const record of Buffer.from(result.stdout).toString("utf8").split("\0")) {
      const match = /^([0-9a-f]+ \d+ -?\d+) ([\s\S]+)$/.exec(record)
      if (!match) continue
      const parsed = parseStatLine(match[1]!)
      if (parsed !== undefined) entries.push(new DirEntry({ name: match[2]!, ...parsed }))
    }
    return entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  })

  // ---------------------------------------------------------------------------------------------
  // stat, mkdir, move, remove

  const fileInfo = Effect.fn("SandboxDriver.fileInfo")(function*(sandboxId: string, path: string) {
    const checked = normalize(yield* checkPath(path))
    const entry = yield* host.lookupRunning(sandboxId)
    const { result, fileError } = yield* fileOp(entry, checked, INFO_SCRIPT, [], { maxOutputBytes: 16 * 1024 })
    const out = decode(result.stdout)
    const newline = out.indexOf("\n")
    const match = /^([0-9a-f]+) (\d+) (\d+) (\d+) (-?\d+)$/.exec(out.slice(0, newline === -1 ? undefined : newline))
    if (!match) return yield* fileError("failed", "unreadable stat output")
    const raw = parseInt(match[1]!, 16)
    const type = typeOfMode(raw)
    return new FileInfo({
      name: checked === "/" ? "/" : Posix.basename(checked),
      path: checked,
      type,
      size: Number(match[2]),
      mode: (raw & 0o7777).toString(8).padStart(4, "0"),
      uid: Number(match[3]),
      gid: Number(match[4]),
      mtime: new Date(Number(match[5]) * 1000).toISOString(),
      // readlink ends the target with a newline (a target may hold newlines of its own).
      target: type === "symlink" && newline !== -1 ? out.slice(newline + 1).replace(/\n$/, "") : null
    })
  })

  const makeDir = Effect.fn("SandboxDriver.makeDir")(function*(
    sandboxId: string,
    path: string,
    options: { readonly parents: boolean; readonly mode: number }
  ) {
    const checked = normalize(yield* checkPath(path))
    const mode = yield* decodeInput(FileMode, options.mode)
    const entry = yield* host.lookupRunning(sandboxId)
    const { result } = yield* fileOp(entry, checked, MKDIR_SCRIPT, [options.parents ? "1" : "0", mode.toString(8)], {
      maxOutputBytes: 4096
    })
    const created = decode(result.stdout).trim() === "created"
    return { created, info: yield* fileInfo(sandboxId, checked) }
  })

  const move = Effect.fn("SandboxDriver.move")(function*(
    sandboxId: string,
    from: string,
    to: string,
    options: { readonly overwrite: boolean }
  ) {
    const source = normalize(yield* checkPath(from))
    const target = normalize(yield* checkPath(to))
    const entry = yield* host.lookupRunning(sandboxId)
    yield* fileOp(entry, source, MOVE_SCRIPT, [target, options.overwrite ? "1" : "0"], { maxOutputBytes: 4096 })
    return yield* fileInfo(sandboxId, target)
  })

  const remove = Effect.fn("SandboxDriver.remove")(function*(
    sandboxId: string,
    path: string,
    options: { readonly recursive: boolean }
  ) {
    const checked = normalize(yield* checkPath(path))
    const entry = yield* host.lookupRunning(sandboxId)
    yield* fileOp(entry, checked, REMOVE_SCRIPT, [options.recursive ? "1" : "0"], { maxOutputBytes: 4096 })
  })

  return { readFile, readFileStream, writeFile, writeFileStream, stat, listDir, fileInfo, makeDir, move, remove }
}
