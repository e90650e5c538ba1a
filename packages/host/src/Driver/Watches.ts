/**
 * Watching a folder of the sandbox (GET .../files/watch): `svc-watch` (`native/svc-watch.c`,
 * in the helper folder beside busybox) runs inside the sandbox as its root, so its inotify
 * instance and watches are the sandbox's own, and the path is resolved there (GUARD: /proc and
 * /sys refused, links resolved as the sandbox would). Its records are read here into a bounded
 * queue per watcher: a client that does not keep up gets a last `overflow` event and the stream
 * ends (the watcher is killed), so no watcher holds more than `MAX_QUEUED` events of the
 * agent's memory. The stream ends when the watcher ends: the folder went, or the sandbox stopped.
 */
import { type Cause, Effect, Queue, Stream } from "effect"
import { type FileWatchEvent, SandboxFileError, SandboxPath } from "../Driver.ts"
import type { Exec } from "./Exec.ts"
import { GUARD_SCRIPT } from "./Files.ts"
import { decodeInput, type DriverHost, HELPER, HELPER_DIR, SANDBOX_PATH } from "./Host.ts"
import { decode, readHeader } from "./Process.ts"

type FileWatchType = FileWatchEvent["type"]

/** Events a watcher holds for a slow client before it gives up with `overflow`. */
export const MAX_QUEUED = 1024
const MAX_RECORD_BYTES = 2 * 4096 + 64
const NOT_FOUND = 3
const KERNEL_INTERFACE = 10

/** Args: path, recursive (1/0). */
const WATCH_SCRIPT = `
B=${HELPER}
${GUARD_SCRIPT}
[ -e "$r" ] || [ -L "$r" ] || exit ${NOT_FOUND}
exec ${HELPER_DIR}/svc-watch "$r" "$2"
`

const TYPES = new Set(["create", "modify", "delete", "move", "overflow", "ready"])

/** Splits the watcher's output ("<type> <dir> <path>\0<from>\0" records) as it comes. */
export class WatchRecords {
  private rest = Buffer.alloc(0)
  push(chunk: Uint8Array): Array<FileWatchEvent | "ready"> {
    const out: Array<FileWatchEvent | "ready"> = []
    let data = this.rest.length > 0 ? Buffer.concat([this.rest, chunk]) : Buffer.from(chunk)
    for (;;) {
      const first = data.indexOf(0)
      if (first === -1) break
      const second = data.indexOf(0, first + 1)
      if (second === -1) break
      const head = data.subarray(0, first).toString("utf8")
      const from = data.subarray(first + 1, second).toString("utf8")
      data = data.subarray(second + 1)
      const match = /^(\w+) ([01]) ([\s\S]*)$/.exec(head)
      if (match === null || !TYPES.has(match[1]!)) continue
      if (match[1] === "ready") {
        out.push("ready")
        continue
      }
      out.push({ type: match[1] as FileWatchType, isDir: match[2] === "1", path: match[3]!, from: from || null })
    }
    this.rest = data.length > MAX_RECORD_BYTES ? Buffer.alloc(0) : Buffer.from(data)
    return out
  }
}

export const makeWatches = (host: DriverHost, exec: Pick<Exec, "spawnInside">) => {
  /**
   * The changes under `path` as they happen, from once the watch is in place (the effect
   * succeeds then); refusals (missing, /proc) fail before. Lives as long as the scope.
   */
  const watch = Effect.fn("SandboxDriver.watch")(function*(
    sandboxId: string,
    path: string,
    options: { readonly recursive: boolean }
  ) {
    const checked = yield* decodeInput(SandboxPath, path)
    const entry = yield* host.lookupRunning(sandboxId)
    const fail = (reason: SandboxFileError["reason"], message: string) =>
      new SandboxFileError({ sandboxId, path: checked, reason, message })
    const proc = yield* exec.spawnInside(
      entry,
      [HELPER, "sh", "-c", WATCH_SCRIPT, "sh", checked, options.recursive ? "1" : "0"],
      { env: { PATH: SANDBOX_PATH }, cwd: "/" }
    )
    const ready = yield* readHeader(proc.stdout, 0, MAX_RECORD_BYTES)
    if (ready === undefined || !ready.toString("utf8").startsWith("ready")) {
      const exit = yield* proc.exit
      if (exit.exitCode === NOT_FOUND || exit.exitCode === 2) return yield* fail("not_found", "not_found")
      if (exit.exitCode === KERNEL_INTERFACE) return yield* fail("kernel_interface", "kernel_interface")
      return yield* fail("failed", decode(exit.stderr).trim().slice(0, 300) || "the watcher did not start")
    }
    // The rest of the ready record (its empty `from`).
    yield* readHeader(proc.stdout, 0, 16)
    const queue = yield* Queue.bounded<FileWatchEvent, Cause.Done>(MAX_QUEUED + 1)
    const records = new WatchRecords()
    let overflowed = false
    const end = () => {
      proc.stdout.off("data", onData)
      proc.kill()
      Queue.endUnsafe(queue)
    }
    const onData = (chunk: Buffer) => {
      for (const event of records.push(chunk)) {
        if (event === "ready" || overflowed) continue
        // One slot is kept for the last word: the client is too slow, or the kernel's queue was.
        if (event.type === "overflow" || Queue.sizeUnsafe(queue) >= MAX_QUEUED) {
          overflowed = true
          Queue.offerUnsafe(queue, { type: "overflow", path: checked, isDir: false, from: null })
          return end()
        }
        Queue.offerUnsafe(queue, event)
      }
    }
    proc.stdout.on("data", onData)
    proc.stdout.once("end", () => Queue.endUnsafe(queue))
    proc.stdout.once("close", () => Queue.endUnsafe(queue))
    yield* Effect.addFinalizer(() => Effect.sync(end))
    return Stream.fromQueue(queue)
  })

  return { watch }
}
