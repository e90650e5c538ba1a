/**
 * Running host commands: bounded output, stdin bytes, a timeout that ends the whole process
 * tree, and interruption that does the same. The building block of exec and the file API.
 * `spawnStreaming` is the same for transfers: stdin and stdout stay streams, never buffers.
 */
import { Effect, type Scope, Stream } from "effect"
import type { Readable, Writable } from "node:stream"
import { DriverFailure } from "../Driver.ts"
import * as Spawner from "./Spawner.ts"

export interface CommandOptions {
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
  readonly killTree?: () => void
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
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGILL: 4,
  SIGTRAP: 5,
  SIGABRT: 6,
  SIGBUS: 7,
  SIGFPE: 8,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGSEGV: 11,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
  SIGXCPU: 24,
  SIGXFSZ: 25,
  SIGSYS: 31
}

/**
 * How long a run waits for end of file on its output pipes once its main process ended and
 * what it had written was read: only a process it left in the background (holding the pipes
 * open) makes it wait, and not longer than this.
 */
const DRAIN_MS = 30

/**
 * Calls `f` once the event loop has polled for I/O after now. A command's end (the spawner's
 * `X`, on the spawner's pipe) and its last output (on its own pipes) are ready together, but a
 * pipe opened in this turn is only polled in the next one, and a busy turn can outlast any
 * timer: a timer started at the end alone dropped output under load (exit 0, empty stdout).
 * An immediate set in a check phase runs in the next turn's check phase, after its poll.
 */
const afterNextPoll = (f: () => void): { cancel: () => void } => {
  let inner: NodeJS.Immediate | undefined
  const outer = setImmediate(() => {
    inner = setImmediate(f)
  })
  return {
    cancel: () => {
      clearImmediate(outer)
      if (inner !== undefined) clearImmediate(inner)
    }
  }
}

/**
 * The bound on waiting for end of file (which the caller listens for and which cancels this):
 * `done` runs `DRAIN_MS` after the output already written was read.
 */
const drainThen = (done: () => void): { cancel: () => void } => {
  let timer: NodeJS.Timeout | undefined
  const poll = afterNextPoll(() => {
    timer = setTimeout(done, DRAIN_MS)
  })
  return {
    cancel: () => {
      poll.cancel()
      if (timer !== undefined) clearTimeout(timer)
    }
  }
}

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

/** stdin this small goes to the spawner with the request (a pipe holding it): no pipe for the agent to open. */
const INLINE_STDIN_BYTES = 64 * 1024

/**
 * Starts `file args` through the spawner (`Spawner.ts`: no fork of the agent) in a session and
 * process group of its own (so a timeout can signal the group, not just the first process),
 * with `fd3` on descriptor 3 when set; `kill` ends the group and whatever left it (`killTree`).
 */
const spawnTree = (
  file: string,
  args: ReadonlyArray<string>,
  options: Pick<CommandOptions, "env" | "fd3" | "killTree">,
  stdin: Spawner.StdioSpec
): Promise<{ readonly child: Spawner.Spawned; readonly kill: () => void }> =>
  Spawner.spawn(file, args, {
    env: options.env ?? {},
    stdio: [stdin, "out", "out", ...(options.fd3 === undefined ? [] : [{ data: options.fd3 }])]
  }).then(
    (child) => ({
      child,
      kill: () => {
        child.killGroup("SIGKILL")
        options.killTree?.()
      }
    }),
    (e) => {
      // A spawner that died after forking the command never answered: what it started may run
      // on (svc-enter's command inside a sandbox outlives it), so its tree is killed now.
      options.killTree?.()
      throw e
    }
  )

const startFailure = (operation: string, file: string, e: unknown) =>
  new DriverFailure({ operation, message: `${file}: ${e instanceof Error ? e.message : String(e)}` })

/** Runs `file args` detached in its own process group and collects its result. */
export const run = (
  operation: string,
  file: string,
  args: ReadonlyArray<string>,
  options: CommandOptions = {}
): Effect.Effect<RunResult, DriverFailure> =>
  Effect.callback<RunResult, DriverFailure>((resume, signal) => {
    const started = performance.now()
    const cap = options.maxOutputBytes ?? 1024 * 1024
    const out = new Collector(cap)
    const err = new Collector(cap)
    let timedOut = false
    let finished = false
    let timer: NodeJS.Timeout | undefined
    let drain: { cancel: () => void } | undefined
    let child: Spawner.Spawned | undefined
    let killAll: (() => void) | undefined

    const finish = (result: Effect.Effect<RunResult, DriverFailure>) => {
      if (finished) return
      finished = true
      if (timer !== undefined) clearTimeout(timer)
      drain?.cancel()
      signal.removeEventListener("abort", onAbort)
      child?.stdout?.destroy()
      child?.stderr?.destroy()
      child?.stdin?.destroy()
      resume(result)
    }

    const onAbort = () => {
      killAll?.()
      finish(Effect.fail(new DriverFailure({ operation, message: "interrupted" })))
    }
    signal.addEventListener("abort", onAbort)

    if (options.timeoutMs !== undefined) {
      timer = setTimeout(() => {
        timedOut = true
        killAll?.()
      }, options.timeoutMs)
    }

    const inline = options.stdin !== undefined && options.stdin.length <= INLINE_STDIN_BYTES
    const stdinSpec: Spawner.StdioSpec = options.stdin === undefined
      ? "ignore"
      : inline
      ? { data: options.stdin }
      : "in"
    spawnTree(file, args, options, stdinSpec).then(({ child: spawned, kill }) => {
      child = spawned
      killAll = kill
      // Interrupted while it started.
      if (finished) return kill()
      spawned.stdout!.on("data", (chunk: Buffer) => out.push(chunk))
      spawned.stderr!.on("data", (chunk: Buffer) => err.push(chunk))
      // The spawner died: its end is unknown, and it was killed (with what it started).
      spawned.on("error", (e) => {
        kill()
        finish(Effect.fail(startFailure(operation, file, e)))
      })

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

      spawned.on("exit", (code, sig) => {
        exitCode = code ?? (sig !== null ? 128 + (signalNumbers[sig] ?? 0) : 255)
        // End of file on both pipes (`close`) completes it; background processes may hold
        // them open: then what was written before the end is read, and it stops there.
        drain = drainThen(complete)
      })
      spawned.on("close", () => {
        if (exitCode !== undefined) complete()
      })

      if (options.stdin !== undefined && !inline && spawned.stdin) {
        // The child may exit without reading: a broken pipe is not our failure.
        spawned.stdin.on("error", () => undefined)
        spawned.stdin.end(options.stdin)
      }
      // Timed out while it started: it ends now, and its end is collected as usual.
      if (timedOut) kill()
    }, (e) => finish(Effect.fail(startFailure(operation, file, e))))
  })

export const decode = (bytes: Uint8Array): string => Buffer.from(bytes).toString("utf8")

/** Runs a command that must succeed; its stderr becomes the failure's message. */
export const runChecked = (
  operation: string,
  file: string,
  args: ReadonlyArray<string>,
  options: CommandOptions = {}
): Effect.Effect<RunResult, DriverFailure> =>
  run(operation, file, args, { timeoutMs: 30_000, ...options }).pipe(
    Effect.flatMap((result) =>
      result.exitCode === 0
        ? Effect.succeed(result)
        : Effect.fail(
          new DriverFailure({
            operation,
            message: `${file} ${args.slice(0, 6).join(" ")}: exit ${result.exitCode}${
              result.timedOut ? " (timed out)" : ""
            }: ${decode(result.stderr).trim().slice(0, 2000)}`
          })
        )
    )
  )

// ---------------------------------------------------------------------------------------------
// Streaming: a host command whose stdin and stdout are streams, for transfers too large to hold.

export interface StreamingOptions {
  /** The complete environment of the child (nothing is inherited). */
  readonly env?: Readonly<Record<string, string>>
  /** As `CommandOptions.fd3`: bytes the child reads on fd 3, then end of file. */
  readonly fd3?: Uint8Array
  /** The whole run, streaming included: past it every process of the run is killed. */
  readonly timeoutMs?: number
  /** Cap of the stderr kept (the rest is read and dropped). */
  readonly maxStderrBytes?: number
  /** As `CommandOptions.killTree`: called on timeout, on `kill` and when the scope closes early. */
  readonly killTree?: () => void
}

export interface ProcessExit {
  readonly exitCode: number
  readonly stderr: Uint8Array
  readonly timedOut: boolean
  readonly durationMs: number
}

export interface StreamingProcess {
  /** The child's stdin: write with backpressure, `end()` once done (EPIPE is swallowed). */
  readonly stdin: Writable
  /** The child's stdout, paused until read. */
  readonly stdout: Readable
  /** Completes once the child has exited and its stderr was read. */
  readonly exit: Effect.Effect<ProcessExit, DriverFailure>
  /** Kills every process of the run (its process group, then `killTree`). */
  readonly kill: () => void
}

/** How long the scope's end waits for killed processes to be reaped. */
const REAP_MS = 5_000

/**
 * Starts `file args` detached in its own process group with piped stdio, for the lifetime of
 * the scope: when the scope closes before the child exited, every process of the run is
 * killed first and only then are its pipes closed (a writer must never see a clean EOF on a
 * transfer that was cut short).
 */
export const spawnStreaming = (
  operation: string,
  file: string,
  args: ReadonlyArray<string>,
  options: StreamingOptions = {}
): Effect.Effect<StreamingProcess, DriverFailure, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => spawnTree(file, args, options, "in"),
      catch: (e) => startFailure(operation, file, e)
    }).pipe(Effect.map(({ child, kill }) => {
      const started = performance.now()
      const err = new Collector(options.maxStderrBytes ?? 64 * 1024)
      let timedOut = false
      let timer: NodeJS.Timeout | undefined
      // The child may stop reading (it failed, or had all it wanted): its exit code says why.
      child.stdin!.on("error", () => undefined)
      child.stdout!.on("error", () => undefined)
      child.stderr!.on("data", (chunk: Buffer) => err.push(chunk))
      const exited = new Promise<Effect.Effect<ProcessExit, DriverFailure>>((resolve) => {
        // The spawner died: its end is unknown, and it was killed (with what it started).
        child.once("error", (e) => {
          kill()
          resolve(Effect.fail(startFailure(operation, file, e)))
        })
        child.once("exit", (code, sig) => {
          if (timer !== undefined) {
            clearTimeout(timer)
          }
          const done = () =>
            resolve(Effect.succeed({
              exitCode: code ?? (sig !== null ? 128 + (signalNumbers[sig] ?? 0) : 255),
              stderr: err.bytes(),
              timedOut,
              durationMs: performance.now() - started
            }))
          // stderr is read to its end, unless a leftover process holds it open.
          if (child.stderr!.readableEnded) {
            return done()
          }
          const drain = drainThen(done)
          child.stderr!.once("end", () => {
            drain.cancel()
            done()
          })
        })
      })
      if (options.timeoutMs !== undefined) {
        timer = setTimeout(() => {
          timedOut = true
          kill()
        }, options.timeoutMs)
      }
      return {
        child,
        timer: () => timer,
        process: {
          stdin: child.stdin!,
          stdout: child.stdout!,
          exit: Effect.flatten(Effect.promise(() => exited)),
          kill
        } satisfies StreamingProcess
      }
    })),
    ({ child, process: run, timer }) =>
      Effect.gen(function*() {
        if (child.exitCode === null && child.signalCode === null) {
          run.kill()
          yield* run.exit.pipe(Effect.ignore, Effect.timeout(REAP_MS), Effect.ignore)
        }
        const pending = timer()
        if (pending !== undefined) clearTimeout(pending)
        child.stdin?.destroy()
        child.stdout?.destroy()
        child.stderr?.destroy()
      })
  ).pipe(Effect.map(({ process: run }) => run))

/**
 * Reads `readable` up to and including the first `delimiter` byte (at most `maxBytes`); what
 * follows stays in the stream. `undefined` when the stream ends first or the line is too long.
 */
export const readHeader = (
  readable: Readable,
  delimiter: number,
  maxBytes: number
): Effect.Effect<Buffer | undefined> =>
  Effect.callback<Buffer | undefined>((resume) => {
    let head = Buffer.alloc(0)
    const detach = () => {
      readable.off("readable", onReadable)
      readable.off("end", onEnd)
      readable.off("close", onEnd)
      readable.off("error", onEnd)
    }
    const finish = (value: Buffer | undefined) => {
      detach()
      resume(Effect.succeed(value))
    }
    const onReadable = () => {
      let chunk: Buffer | null
      while ((chunk = readable.read() as Buffer | null) !== null) {
        const at = chunk.indexOf(delimiter)
        if (at >= 0) {
          head = Buffer.concat([head, chunk.subarray(0, at + 1)])
          if (at + 1 < chunk.length) readable.unshift(chunk.subarray(at + 1))
          return finish(head)
        }
        head = Buffer.concat([head, chunk])
        if (head.length > maxBytes) return finish(undefined)
      }
    }
    const onEnd = () => finish(undefined)
    if (readable.readableEnded || readable.destroyed) return finish(undefined)
    readable.on("readable", onReadable)
    readable.once("end", onEnd)
    readable.once("close", onEnd)
    readable.once("error", onEnd)
    onReadable()
    return Effect.sync(detach)
  })

/** Waits until `readable` has bytes to read (`true`) or has ended (`false`). */
export const awaitData = (readable: Readable): Effect.Effect<boolean> =>
  Effect.callback<boolean>((resume) => {
    if (readable.readableLength > 0) return resume(Effect.succeed(true))
    if (readable.readableEnded || readable.destroyed) return resume(Effect.succeed(false))
    const onReadable = () => {
      // `readable` also fires at the end; read(0) makes a pending end visible.
      if (readable.readableLength > 0) return finish(true)
      readable.read(0)
      if (readable.readableLength > 0) return finish(true)
      if (readable.readableEnded) finish(false)
    }
    const onEnd = () => finish(false)
    const finish = (value: boolean) => {
      readable.off("readable", onReadable)
      readable.off("end", onEnd)
      readable.off("close", onEnd)
      resume(Effect.succeed(value))
    }
    readable.on("readable", onReadable)
    readable.once("end", onEnd)
    readable.once("close", onEnd)
    return Effect.sync(() => {
      readable.off("readable", onReadable)
      readable.off("end", onEnd)
      readable.off("close", onEnd)
    })
  })

export interface PumpResult {
  /** Bytes written (at most `maxBytes`). */
  readonly bytes: number
  /** The source had more than `maxBytes`: writing stopped there. */
  readonly overLimit: boolean
  /** The writable failed (its reader is gone): writing stopped there. */
  readonly readerGone: boolean
}

/**
 * Writes `source` into `writable` with backpressure (one chunk in flight beyond the writable's
 * buffer), at most `maxBytes`. Does not end the writable: whether what was written is complete
 * is the caller's decision.
 */
export const pump = <E, R>(
  source: Stream.Stream<Uint8Array, E, R>,
  writable: Writable,
  maxBytes: number
): Effect.Effect<PumpResult, E, R> =>
  Effect.suspend(() => {
    let bytes = 0
    let overLimit = false
    let readerGone = writable.destroyed || writable.writableEnded
    const gone = () => {
      readerGone = true
    }
    writable.on("error", gone)
    writable.once("close", gone)
    const write = (chunk: Uint8Array) =>
      Effect.callback<void>((resume) => {
        if (readerGone) return resume(Effect.void)
        if (writable.write(chunk)) return resume(Effect.void)
        const done = () => {
          writable.off("drain", done)
          writable.off("close", done)
          writable.off("error", done)
          resume(Effect.void)
        }
        writable.once("drain", done)
        writable.once("close", done)
        writable.once("error", done)
        return Effect.sync(() => {
          writable.off("drain", done)
          writable.off("close", done)
          writable.off("error", done)
        })
      })
    return source.pipe(
      Stream.takeWhile(() => !overLimit && !readerGone),
      Stream.runForEach((chunk) => {
        if (bytes + chunk.length > maxBytes) {
          overLimit = true
          return Effect.void
        }
        bytes += chunk.length
        return write(chunk)
      }),
      Effect.map((): PumpResult => ({ bytes, overLimit, readerGone })),
      Effect.ensuring(Effect.sync(() => {
        writable.off("error", gone)
        writable.off("close", gone)
      }))
    )
  })

/**
 * `pump` for a Node stream (a server's request body): the bytes go from `data` events straight
 * into `writable` (paused while it is full, as `pipe` does), no effect per chunk. Fails with
 * `body.cut` when the source fails or closes before its end (a request whose client went away).
 */
export const pumpReadable = <E>(
  body: { readonly readable: Readable; readonly cut: (cause: unknown) => E },
  writable: Writable,
  maxBytes: number
): Effect.Effect<PumpResult, E> =>
  Effect.callback<PumpResult, E>((resume) => {
    const source = body.readable
    let bytes = 0
    let finished = false
    const detach = () => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
      source.off("close", onClose)
      writable.off("drain", onDrain)
      writable.off("error", onGone)
      writable.off("close", onGone)
    }
    const finish = (result: Effect.Effect<PumpResult, E>) => {
      if (finished) return
      finished = true
      detach()
      // What is left unread stays in the source (over the limit, the reader gone).
      source.pause()
      resume(result)
    }
    const onData = (chunk: Buffer) => {
      if (bytes + chunk.length > maxBytes) return finish(Effect.succeed({ bytes, overLimit: true, readerGone: false }))
      bytes += chunk.length
      if (!writable.write(chunk)) source.pause()
    }
    const onDrain = () => {
      if (!finished) source.resume()
    }
    const onEnd = () => {
      // A request cut short can end without its last bytes: `complete` tells.
      if ("complete" in source && source.complete === false) {
        return finish(Effect.fail(body.cut("the body was cut short")))
      }
      finish(Effect.succeed({ bytes, overLimit: false, readerGone: false }))
    }
    const onError = (e: unknown) => finish(Effect.fail(body.cut(e)))
    const onClose = () => {
      if (!source.readableEnded) finish(Effect.fail(body.cut("the body closed before its end")))
    }
    const onGone = () => finish(Effect.succeed({ bytes, overLimit: false, readerGone: true }))
    if (writable.destroyed || writable.writableEnded) {
      return resume(Effect.succeed({ bytes: 0, overLimit: false, readerGone: true }))
    }
    if (source.readableEnded) return resume(Effect.succeed({ bytes: 0, overLimit: false, readerGone: false }))
    if (source.destroyed) return resume(Effect.fail(body.cut("the body was closed")))
    source.on("data", onData)
    source.once("end", onEnd)
    source.once("error", onError)
    source.once("close", onClose)
    writable.on("drain", onDrain)
    writable.once("error", onGone)
    writable.once("close", onGone)
    source.resume()
    return Effect.sync(() => {
      finished = true
      detach()
      source.pause()
    })
  })
