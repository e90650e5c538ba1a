/**
 * A folder of the sandbox as a tar stream, both ways (GET/PUT .../files/archive), with the helper
 * busybox's `tar` run inside the sandbox as its root: every name is resolved there, where `/` is
 * the sandbox's root, so neither the sandbox's links nor `..` can reach the host's files (the
 * agent never opens a path under the sandbox's folder; docs/security.md#sandbox-identity).
 *
 * Upload: the body (gunzipped here when it is a tar.gz) passes `TarCheck` block by block before
 * the extracting `tar` sees a header, into a staging folder made next to the target on the same
 * file system. A refused entry, a stream that is not a tar or is cut, a full disk: the staging
 * folder is removed and nothing was written under the target. Only once every entry is out does
 * a second script check that no folder of the archive would go through a link of the target's
 * tree (refused, nothing written) and move the entries into place (a new target: one rename).
 * Download: `tar c` of the folder (gzipped by the sandbox's busybox for tar.gz), `/proc` and
 * `/sys` left out of `/`. Nothing is held whole: bytes flow with backpressure.
 */
import * as NodeStream from "@effect/platform-node/NodeStream"
import { Effect, Stream } from "effect"
import { randomBytes } from "node:crypto"
import * as Posix from "node:path/posix"
import * as Zlib from "node:zlib"
import { DriverFailure, type FileStream, SandboxFileError, SandboxPath } from "../Driver.ts"
import type { Exec } from "./Exec.ts"
import { errnoOf, GUARD_SCRIPT } from "./Files.ts"
import { decodeInput, type DriverHost, HELPER, type RunningSandbox, SANDBOX_PATH } from "./Host.ts"
import { decode, type ProcessExit, pump, readHeader } from "./Process.ts"
import { TarCheck } from "./TarCheck.ts"

export type ArchiveFormat = "tar" | "tar.gz"

/** Exit codes of the scripts, as in `Files.ts`. */
const NOT_FOUND = 3
const NOT_DIRECTORY = 7
const PARENTS_FAILED = 8
const REFUSED = 9
const KERNEL_INTERFACE = 10
const THROUGH_LINK = 13

/** How long one transfer's processes may run (the API waits as long). */
const ARCHIVE_TIMEOUT_MS = 3_600_000
const SCRIPT_TIMEOUT_MS = 600_000
const MAX_HEADER_BYTES = 2 * 4096 + 64

/**
 * Args: path, staging name. Prints "<target>\0<staging>\0", then extracts stdin into the staging
 * folder, made in the target (an existing folder) or in its deepest existing ancestor.
 */
const RECEIVE_SCRIPT = `
B=${HELPER}
${GUARD_SCRIPT}
t=\${r%/}
[ -z "$t" ] && t=/
if [ -e "$t" ]; then
  [ -d "$t" ] || exit ${NOT_DIRECTORY}
  a=$t
else
  a=\${t%/*}
  while [ -n "$a" ] && [ ! -e "$a" ]; do a=\${a%/*}; done
  [ -z "$a" ] && a=/
  [ -d "$a" ] || exit ${NOT_DIRECTORY}
fi
s=\${a%/}/$2
"$B" mkdir -- "$s" || exit ${REFUSED}
printf '%s\\0%s\\0' "$t" "$s"
exec "$B" tar x -o -f - -C "$s"
`

/**
 * Args: target, staging. Refuses (13) when a folder of the archive is a link in the target's
 * tree, before moving anything; then moves the staging folder's entries into place.
 */
const COMMIT_SCRIPT = `
B=${HELPER}
t=$1
s=$2
if [ -e "$t" ]; then
  cd -- "$s" || exit ${REFUSED}
  x=$("$B" find . -mindepth 1 -type d -exec "$B" sh -c 'for d; do [ -L "$0/$d" ] && echo L; done; exit 0' "$t" {} +)
  [ -n "$x" ] && exit ${THROUGH_LINK}
  cd /
  merge() {
    local f n d
    for f in "$1"/.* "$1"/*; do
      n=\${f##*/}
      case "$n" in .|..) continue;; esac
      [ -e "$f" ] || [ -L "$f" ] || continue
      d=\${2%/}/$n
      if [ -d "$f" ] && [ ! -L "$f" ] && [ -d "$d" ] && [ ! -L "$d" ]; then
        merge "$f" "$d" || return 1
      else
        if [ -e "$d" ] || [ -L "$d" ]; then "$B" rm -rf -- "$d" || return 1; fi
        "$B" mv -- "$f" "$d" || return 1
      fi
    done
  }
  merge "$s" "$t" || exit ${REFUSED}
  "$B" rm -rf -- "$s"
  exit 0
fi
d=\${t%/*}
[ -z "$d" ] && d=/
"$B" mkdir -p -- "$d" || exit ${PARENTS_FAILED}
"$B" mv -- "$s" "$t" || exit ${REFUSED}
`

/** Args: path, "z" or "". Prints a newline once the folder is found, then the tar. */
const SEND_SCRIPT = `
B=${HELPER}
${GUARD_SCRIPT}
p=$r
[ -e "$p" ] || exit ${NOT_FOUND}
[ -d "$p" ] || exit ${NOT_DIRECTORY}
cd -- "$p" || exit ${REFUSED}
printf '\\n'
z=$2
if [ "$("$B" pwd)" = / ]; then
  set --
  for f in .* *; do
    case "$f" in .|..|proc|sys) continue;; esac
    [ -e "$f" ] || [ -L "$f" ] || continue
    set -- "$@" "./$f"
  done
  exec "$B" tar c"$z"f - "$@"
fi
exec "$B" tar c"$z"f - .
`

/** What the extracting tar or a script said, as the refusal it stands for. */
const refusalOf = (sandboxId: string, path: string, exit: Pick<ProcessExit, "exitCode" | "stderr" | "timedOut">) => {
  const error = (reason: SandboxFileError["reason"], message: string, errno?: string) =>
    new SandboxFileError({ sandboxId, path, reason, message, ...(errno !== undefined ? { errno } : {}) })
  if (exit.timedOut) return error("failed", "timed out")
  const stderr = decode(exit.stderr).trim()
  switch (exit.exitCode) {
    case NOT_FOUND:
      return error("not_found", "not_found")
    case NOT_DIRECTORY:
      return error("not_directory", "not a folder")
    case KERNEL_INTERFACE:
      return error("kernel_interface", "kernel_interface")
    case THROUGH_LINK:
      return error("invalid", "an entry of the archive would go through a symlink of the target's folder")
  }
  const kernel = errnoOf(stderr)
  if (kernel?.errno === "ENOSPC" || kernel?.errno === "EDQUOT") {
    return error("no_space", "the sandbox's disk is full", kernel.errno)
  }
  if (kernel !== undefined) return error("refused", kernel.message, kernel.errno)
  // tar itself refused the stream the check let through.
  return error("invalid", stderr.split("\n").pop()?.slice(0, 300) || `the archive could not be extracted`)
}

export const makeArchives = (host: DriverHost, exec: Pick<Exec, "runInside" | "spawnInside">) => {
  const inside = (entry: RunningSandbox, script: string, args: ReadonlyArray<string>, timeoutMs: number) =>
    exec.spawnInside(entry, [HELPER, "sh", "-c", script, "sh", ...args], {
      env: { PATH: SANDBOX_PATH },
      cwd: "/",
      timeoutMs
    })

  const runScript = (entry: RunningSandbox, script: string, args: ReadonlyArray<string>) =>
    exec.runInside(entry, [HELPER, "sh", "-c", script, "sh", ...args], {
      env: { PATH: SANDBOX_PATH },
      cwd: "/",
      timeoutMs: SCRIPT_TIMEOUT_MS,
      maxOutputBytes: 64 * 1024
    })

  /** The folder at `path` as a tar (or tar.gz) stream; refusals fail before any byte. */
  const readArchive = Effect.fn("SandboxDriver.readArchive")(function*(
    sandboxId: string,
    path: string,
    format: ArchiveFormat
  ) {
    const checked = Posix.normalize(yield* decodeInput(SandboxPath, path))
    const entry = yield* host.lookupRunning(sandboxId)
    const proc = yield* inside(entry, SEND_SCRIPT, [checked, format === "tar.gz" ? "z" : ""], ARCHIVE_TIMEOUT_MS)
    const header = yield* readHeader(proc.stdout, 10, 16)
    if (header === undefined) {
      const exit = yield* proc.exit
      return yield* refusalOf(sandboxId, checked, exit.exitCode === 0 ? { ...exit, exitCode: 1 } : exit)
    }
    const stream: Stream.Stream<Uint8Array, SandboxFileError | DriverFailure> = NodeStream.fromReadable<
      Uint8Array,
      DriverFailure
    >({
      evaluate: () => proc.stdout,
      onError: (e) => new DriverFailure({ operation: "readArchive", message: String(e) }),
      closeOnDone: false
    }).pipe(
      Stream.concat(Stream.fromEffectDrain(Effect.gen(function*() {
        const exit = yield* proc.exit
        if (exit.exitCode !== 0 || exit.timedOut) return yield* refusalOf(sandboxId, checked, exit)
      })))
    )
    return { size: null, stream } satisfies FileStream as FileStream
  })

  /**
   * Extracts the tar (or tar.gz) `body` under `path` (made with its parents): every entry or
   * none. Refused (`invalid`) before anything is written when an entry would land outside.
   */
  const writeArchive = <E, R>(
    sandboxId: string,
    path: string,
    body: Stream.Stream<Uint8Array, E, R>,
    format: ArchiveFormat
  ) =>
    Effect.scoped(Effect.gen(function*() {
      const checked = Posix.normalize(yield* decodeInput(SandboxPath, path))
      const entry = yield* host.lookupRunning(sandboxId)
      const fail = (reason: SandboxFileError["reason"], message: string) =>
        new SandboxFileError({ sandboxId, path: checked, reason, message })
      const staging = `.svc-archive-${randomBytes(8).toString("hex")}`
      const proc = yield* inside(entry, RECEIVE_SCRIPT, [checked, staging], ARCHIVE_TIMEOUT_MS)
      const first = yield* readHeader(proc.stdout, 0, MAX_HEADER_BYTES)
      const second = first === undefined ? undefined : yield* readHeader(proc.stdout, 0, MAX_HEADER_BYTES)
      if (first === undefined || second === undefined) {
        const exit = yield* proc.exit
        return yield* refusalOf(sandboxId, checked, exit.exitCode === 0 ? { ...exit, exitCode: 1 } : exit)
      }
      const target = first.subarray(0, -1).toString("utf8")
      const stagingPath = second.subarray(0, -1).toString("utf8")
      let committed = false
      // Whatever ends this early (a refusal, a cut body, interruption): tar is killed before
      // it sees an end, and the staging folder goes.
      yield* Effect.addFinalizer(() =>
        committed ? Effect.void : Effect.andThen(
          Effect.sync(proc.kill),
          exec.runInside(entry, [HELPER, "rm", "-rf", "--", stagingPath], {
            env: { PATH: SANDBOX_PATH },
            cwd: "/",
            timeoutMs: SCRIPT_TIMEOUT_MS
          })
        ).pipe(Effect.ignore)
      )
      const check = new TarCheck()
      const unzipped: Stream.Stream<Uint8Array, E | SandboxFileError, R> = format === "tar.gz"
        ? NodeStream.pipeThroughDuplex(body, {
          evaluate: () => Zlib.createGunzip(),
          onError: () => fail("invalid", "not a gzip stream, or a cut one")
        }) as Stream.Stream<Uint8Array, E | SandboxFileError, R>
        : body
      const checked$ = unzipped.pipe(
        Stream.mapEffect((chunk) => {
          const refusal = check.push(chunk)
          return refusal === undefined ? Effect.succeed(chunk) : Effect.fail(fail("invalid", refusal))
        }),
        Stream.concat(Stream.fromEffectDrain(Effect.suspend(() => {
          const refusal = check.end()
          return refusal === undefined ? Effect.void : Effect.fail(fail("invalid", refusal))
        })))
      )
      const result = yield* pump(checked$, proc.stdin, Number.MAX_SAFE_INTEGER)
      if (result.readerGone) {
        const exit = yield* proc.exit
        return yield* refusalOf(sandboxId, checked, exit.exitCode === 0 ? { ...exit, exitCode: 1 } : exit)
      }
      proc.stdin.end()
      const exit = yield* proc.exit
      if (exit.exitCode !== 0 || exit.timedOut) return yield* refusalOf(sandboxId, checked, exit)
      const commit = yield* runScript(entry, COMMIT_SCRIPT, [target, stagingPath])
      if (commit.exitCode !== 0 || commit.timedOut) return yield* refusalOf(sandboxId, checked, commit)
      committed = true
      return { entries: check.count }
    })).pipe(Effect.withSpan("SandboxDriver.writeArchive"))

  return { readArchive, writeArchive }
}
