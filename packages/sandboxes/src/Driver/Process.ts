/**
 * Running host commands: bounded output, stdin bytes, a timeout that ends the whole process
 * tree, and interruption that does the same. The building block of exec and the file API.
 */
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { DriverFailure } from "../Driver.ts"

export interface RunOptions {
  /** The complete environment of the child (nothing is inherited). */
  readonly env?: Readonly<Record<string, string>>
  readonly stdin?: Uint8Array
  /** Bytes the child reads on fd 3 (then end of file): how `svc-enter` receives an environment. */
  readonly fd3?: Uint8Array
  readonly timeoutMs?: number
  /** Cap of stdout and of stderr each; the rest is read and dropped. */
  readonly maxOutputBytes?: number
  /**
   * Ends every process the run started, including those that left its process group (the
   * namespaces driver kills its per-exec cgroup). Called on timeout and on interruption.
   */
  readonly killTree?: (pid: number) => void
}

export interface RunResult {
  readonly exitCode: number
  readonly stdout: Uint8Array
  readonly stderr: Uint8Array
  readonly stdoutTruncated: boolean
  readonly stderrTruncated: boolean
  readonly timedOut: boolean
  readonly durationMs: number
}

const signalNumbers: Record<string, number> = {
  SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGILL: 4, SIGTRAP: 5, SIGABRT: 6, SIGBUS: 7, SIGFPE: 8,
  SIGKILL: 9, SIGUSR1: 10, SIGSEGV: 11, SIGUSR2: 12, SIGPIPE: 13, SIGALRM: 14, SIGTERM: 15,
  SIGXCPU: 24, SIGXFSZ: 25, SIGSYS: 31
}

/** Output still buffered in the pipes after the main process ended is read for this long. */
const DRAIN_MS = 30

class Collector {
  readonly chunks: Array<Buffer> = []
  size = 0
  truncated = false
  readonly cap: number
  constructor(cap: number) {
    this.cap = cap
  }
  push(chunk: Buffer): void {
    if (this.size >= this.cap) {
      this.truncated = true
      return
    }
    const room = this.cap - this.size
    if (chunk.length > room) {
      this.chunks.push(chunk.subarray(0, room))
      this.size += room
      this.truncated = true
    } else {
      this.chunks.push(chunk)
      this.size += chunk.length
    }
  }
  bytes(): Uint8Array {
    return new Uint8Array(Buffer.concat(this.chunks, this.size))
  }
}

/** Runs `file args` detached in its own process group and collects its result. */
export const run = (
  operation: string,
  file: string,
  args: ReadonlyArray<string>,
  options: RunOptions = {}
): Effect.Effect<RunResult, DriverFailure> =>
  Effect.callback<RunResult, DriverFailure>((resume, signal) => {
    const started = performance.now()
    const cap = options.maxOutputBytes ?? 1024 * 1024
    const out = new Collector(cap)
    const err = new Collector(cap)
    let timedOut = false
    let finished = false
    let timer: NodeJS.Timeout | undefined
    let drain: NodeJS.Timeout | undefined

    const child = spawn(file, args as Array<string>, {
      env: options.env ?? {},
      stdio: [options.stdin === undefined ? "ignore" : "pipe", "pipe", "pipe", ...(options.fd3 === undefined ? [] : ["pipe" as const])],
      // Own process group: a timeout can signal the group, not just the first process.
      detached: true
    })

    const killAll = () => {
      if (child.pid === undefined) return
      try {
        process.kill(-child.pid, "SIGKILL")
      } catch {
        // Already gone.
      }
      options.killTree?.(child.pid)
    }

    const finish = (result: Effect.Effect<RunResult, DriverFailure>) => {
      if (finished) return
      finished = true
      if (timer !== undefined) clearTimeout(timer)
      if (drain !== undefined) clearTimeout(drain)
      signal.removeEventListener("abort", onAbort)
      child.stdout?.destroy()
      child.stderr?.destroy()
      child.stdin?.destroy()
      resume(result)
    }

    const onAbort = () => {
      killAll()
      finish(Effect.fail(new DriverFailure({ operation, message: "interrupted" })))
    }
    signal.addEventListener("abort", onAbort)

    child.stdout!.on("data", (chunk: Buffer) => out.push(chunk))
    child.stderr!.on("data", (chunk: Buffer) => err.push(chunk))
    child.on("error", (e) => finish(Effect.fail(new DriverFailure({ operation, message: `${file}: ${e.message}` }))))

    let exitCode: number | undefined
    const complete = () =>
      finish(Effect.succeed({
        exitCode: exitCode ?? 255,
        stdout: out.bytes(),
        stderr: err.bytes(),
        stdoutTruncated: out.truncated,
        stderrTruncated: err.truncated,
        timedOut,
        durationMs: performance.now() - started
      }))

    child.on("exit", (code, sig) => {
      exitCode = code ?? (sig !== null ? 128 + (signalNumbers[sig] ?? 0) : 255)
      // Background processes may hold the pipes open forever: read what is buffered, then stop.
      drain = setTimeout(complete, DRAIN_MS)
    })
    child.on("close", () => {
      if (exitCode !== undefined) complete()
    })

    if (options.timeoutMs !== undefined) {
      timer = setTimeout(() => {
        timedOut = true
        killAll()
      }, options.timeoutMs)
    }

    if (options.fd3 !== undefined) {
      const fd3 = child.stdio[3] as NodeJS.WritableStream
      fd3.on("error", () => undefined)
      fd3.end(options.fd3)
    }
    if (options.stdin !== undefined && child.stdin) {
      // The child may exit without reading: a broken pipe is not our failure.
      child.stdin.on("error", () => undefined)
      child.stdin.end(options.stdin)
    }
  })

export const decode = (bytes: Uint8Array): string => Buffer.from(bytes).toString("utf8")

/** Runs a command that must succeed; its stderr becomes the failure's message. */
export const runChecked = (
  operation: string,
  file: string,
  args: ReadonlyArray<string>,
  options: RunOptions = {}
): Effect.Effect<RunResult, DriverFailure> =>
  run(operation, file, args, { timeoutMs: 30_000, ...options }).pipe(
    Effect.flatMap((result) =>
      result.exitCode === 0
        ? Effect.succeed(result)
        : Effect.fail(
          new DriverFailure({
            operation,
            message: `${file} ${args.slice(0, 6).join(" ")}: exit ${result.exitCode}${result.timedOut ? " (timed out)" : ""}: ${decode(result.stderr).trim().slice(0, 2000)}`
          })
        )
    )
  )
