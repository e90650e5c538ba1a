/**
 * The file API (`readFile`, `writeFile`, `stat`, `listDir`) as small busybox scripts run through
 * the exec path, inside the sandbox where `/` is the sandbox root: `..`, absolute symlinks and
 * `/proc/1/root` all resolve within the sandbox and never reach the host's files, which the
 * agent would risk by opening paths under the sandbox's folder from the host side.
 */
import { Effect } from "effect"
import {
  DirEntry,
  type EntryType,
  FileMode,
  FileStat,
  MAX_FILE_BYTES,
  SandboxFileError,
  SandboxPath
} from "../Driver.ts"
import type { Exec } from "./Exec.ts"
import { decodeInput, type DriverHost, HELPER, invalid, SANDBOX_PATH } from "./Host.ts"
import { decode, type RunOptions } from "./Process.ts"

// Each script exits with one of these codes to name its refusal.
const FILE_EXIT: Record<number, SandboxFileError["reason"]> = {
  3: "not_found",
  4: "is_directory",
  5: "not_regular_file",
  6: "too_large",
  7: "not_directory"
}

const READ_SCRIPT = `
B=${HELPER}
p=$1
[ -e "$p" ] || exit 3
[ -d "$p" ] && exit 4
[ -f "$p" ] || exit 5
exec "$B" head -c "$2" -- "$p"
`

const WRITE_SCRIPT = `
B=${HELPER}
p=$1
case "$p" in */) exit 4;; esac
d=\${p%/*}
[ -z "$d" ] && d=/
[ -d "$p" ] && exit 4
if [ ! -d "$d" ]; then
  [ -e "$d" ] && exit 7
  "$B" mkdir -p -- "$d" 2>/dev/null || exit 7
fi
"$B" cat > "$p" || exit 1
"$B" chmod "$2" "$p"
`

const STAT_SCRIPT = `
B=${HELPER}
p=$1
[ -e "$p" ] || [ -L "$p" ] || exit 3
"$B" stat -c '%f %s %Y' -- "$p"
`

/** One record per entry: "<hex mode> <size> <mtime> <name>\\0" (names may hold newlines). */
const LIST_SCRIPT = `
B=${HELPER}
p=$1
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

const FILE_OP_TIMEOUT_MS = 60_000

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

export const makeFiles = (host: DriverHost, exec: Pick<Exec, "runInside">) => {
  /** Runs a file API script; maps its exit code to the refusal it stands for. */
  const fileOp = (
    sandboxId: string,
    path: string,
    script: string,
    extraArgs: ReadonlyArray<string>,
    options: Pick<RunOptions, "stdin" | "maxOutputBytes"> = {}
  ) =>
    Effect.gen(function*() {
      const entry = yield* host.lookupRunning(sandboxId)
      // The scripts call the helper busybox by path: they work in templates without one.
      const result = yield* exec.runInside(entry, [HELPER, "sh", "-c", script, "sh", path, ...extraArgs], {
        env: { PATH: SANDBOX_PATH },
        cwd: "/",
        timeoutMs: FILE_OP_TIMEOUT_MS,
        ...options
      })
      const fileError = (reason: SandboxFileError["reason"], message: string) =>
        new SandboxFileError({ sandboxId: entry.record.sandboxId, path, reason, message })
      if (result.timedOut) return yield* fileError("failed", "timed out")
      if (result.exitCode !== 0) {
        const stderr = decode(result.stderr).trim()
        const reason = FILE_EXIT[result.exitCode] ?? (/denied|not permitted|read-only/i.test(stderr) ? "permission_denied" : "failed")
        return yield* fileError(reason, stderr.slice(0, 500) || reason)
      }
      return { result, fileError }
    })

  const readFile = Effect.fn("SandboxDriver.readFile")(function*(
    sandboxId: string,
    path: string,
    options?: { readonly maxBytes?: number }
  ) {
    const checked = yield* checkPath(path)
    const max = Math.min(Math.max(0, Math.floor(options?.maxBytes ?? MAX_FILE_BYTES)), MAX_FILE_BYTES)
    // One byte more than allowed: its arrival is how a file over the limit is told apart.
    const { result, fileError } = yield* fileOp(sandboxId, checked, READ_SCRIPT, [String(max + 1)], {
      maxOutputBytes: max + 1
    })
    if (result.stdout.length > max) return yield* fileError("too_large", `larger than ${max} bytes`)
    return result.stdout
  })

  const writeFile = Effect.fn("SandboxDriver.writeFile")(function*(
    sandboxId: string,
    path: string,
    bytes: Uint8Array,
    mode?: number
  ) {
    const checked = yield* checkPath(path)
    const fileMode = yield* decodeInput(FileMode, mode ?? 0o644)
    if (!(bytes instanceof Uint8Array)) return yield* invalid("bytes must be a Uint8Array")
    if (bytes.length > MAX_FILE_BYTES) {
      return yield* new SandboxFileError({ sandboxId, path: checked, reason: "too_large", message: `at most ${MAX_FILE_BYTES} bytes` })
    }
    yield* fileOp(sandboxId, checked, WRITE_SCRIPT, [fileMode.toString(8)], { stdin: bytes, maxOutputBytes: 64 * 1024 })
  })

  const stat = Effect.fn("SandboxDriver.stat")(function*(sandboxId: string, path: string) {
    const checked = yield* checkPath(path)
    const { result, fileError } = yield* fileOp(sandboxId, checked, STAT_SCRIPT, [], { maxOutputBytes: 4096 })
    const parsed = parseStatLine(decode(result.stdout))
    if (parsed === undefined) return yield* fileError("failed", "unreadable stat output")
    return new FileStat(parsed)
  })

  const listDir = Effect.fn("SandboxDriver.listDir")(function*(sandboxId: string, path: string) {
    const checked = yield* checkPath(path)
    const { result } = yield* fileOp(sandboxId, checked, LIST_SCRIPT, [], { maxOutputBytes: 16 * 1024 * 1024 })
    const entries: Array<DirEntry> = []
    for (const record of Buffer.from(result.stdout).toString("utf8").split("\0")) {
      const match = /^([0-9a-f]+ \d+ -?\d+) ([\s\S]+)$/.exec(record)
      if (!match) continue
      const parsed = parseStatLine(match[1]!)
      if (parsed !== undefined) entries.push(new DirEntry({ name: match[2]!, ...parsed }))
    }
    return entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  })

  return { readFile, writeFile, stat, listDir }
}
