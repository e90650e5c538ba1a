/**
 * Reading a template's `start_cmd` output (`/var/log/svc-start.log` inside the sandbox, where
 * `Readiness.ts` sends it) a piece at a time, bounded: each read takes at most `READ_BYTES` from
 * where the last one stopped, and at most `allowance` lines of it are kept; past either bound
 * the rest up to the file's end is skipped, and what was dropped is counted. `take` is pure.
 */

/** The most bytes one read takes from the file. */
export const READ_BYTES = 64 * 1024

/**
 * Run inside the sandbox (its own user and limits, so a hostile file costs it alone): prints the
 * file's size on a line, then up to `$2` bytes from offset `$1`. Not a regular file: size 0.
 */
export const READ_SCRIPT = `f=/var/log/svc-start.log
if [ ! -f "$f" ]; then echo 0; exit 0; fi
s=$(wc -c < "$f")
echo $s
if [ "$s" -gt "$1" ]; then tail -c +$(($1 + 1)) "$f" | head -c "$2"; fi`

/** Where a sandbox's reading stands: the next offset, and a line begun but not ended yet. */
export interface StartLogCursor {
  readonly offset: number
  readonly partial: string
}

export const START: StartLogCursor = { offset: 0, partial: "" }

export interface Taken {
  readonly lines: ReadonlyArray<string>
  readonly cursor: StartLogCursor
  /** Lines seen and not kept (over the allowance). */
  readonly droppedLines: number
  /** Bytes skipped unread (past the bounds, up to the file's end). */
  readonly droppedBytes: number
}

/** The longest line begun and kept waiting for its end; a longer one is logged as it is. */
const MAX_PARTIAL = 4_096

/**
 * What one read gives: `size` is the file's size, `chunk` the bytes read from `cursor.offset`.
 * A file smaller than the offset was replaced or truncated: it is read from its start again.
 */
export const take = (
  cursor: StartLogCursor,
  size: number,
  chunk: Uint8Array,
  allowance: number
): Taken => {
  if (size < cursor.offset) return { lines: [], cursor: START, droppedLines: 0, droppedBytes: 0 }
  const text = cursor.partial + new TextDecoder().decode(chunk)
  const pieces = text.split("\n")
  let partial = pieces.pop() ?? ""
  const complete = pieces.map((line) => line.replace(/\r$/, ""))
  if (partial.length > MAX_PARTIAL) {
    complete.push(partial)
    partial = ""
  }
  const lines = complete.slice(0, allowance)
  const droppedLines = complete.length - lines.length
  const read = cursor.offset + chunk.length
  // Past a bound: everything up to the end of the file is dropped, so the log stays current.
  if (droppedLines > 0 || (chunk.length >= READ_BYTES && size > read)) {
    return { lines, cursor: { offset: size, partial: "" }, droppedLines, droppedBytes: Math.max(0, size - read) }
  }
  return { lines, cursor: { offset: read, partial }, droppedLines: 0, droppedBytes: 0 }
}

/** Splits the read script's output into the file's size and the bytes read. */
export const parseRead = (stdout: Uint8Array): { readonly size: number; readonly chunk: Uint8Array } | undefined => {
  const newline = stdout.indexOf(10)
  if (newline < 0) return undefined
  const size = Number(new TextDecoder().decode(stdout.subarray(0, newline)).trim())
  if (!Number.isSafeInteger(size) || size < 0) return undefined
  return { size, chunk: stdout.subarray(newline + 1) }
}
