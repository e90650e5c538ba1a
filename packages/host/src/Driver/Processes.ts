/**
 * Commands whose output is streamed, and background processes (docs/contract.md#sandbox-processes).
 * Both run through `svc-enter` exactly like an exec (`Exec.ts`: the sandbox's namespaces,
 * cgroups, identity, capability set and seccomp filter), each in a pids group of its own that a
 * timeout, an interruption or a KILL ends whole.
 *
 * Background processes belong to this agent process: their pipes end here. Their output is kept
 * in memory (the last `KEEP_BYTES` of each stream, at most `KEEP_BYTES_PER_SANDBOX` for all of a
 * sandbox's processes together: past it the exited ones go first, the oldest first, then the
 * running ones that kept the most lose their oldest bytes), they are named by their pid as the sandbox
 * sees it (`svc-enter --report-fd`), signals go through `svc-enter`, which passes them on. A
 * stop or a delete of the sandbox marks them first, so their end says `sandbox_stopped`; the
 * agent stopping ends them (their pipes would have no reader).
 */
import { Effect, Queue, Stream } from "effect"
import type { Readable, Writable } from "node:stream"
import {
  DriverExecRequest,
  DriverFailure,
  type ProcessEndReason,
  type ProcessEvent,
  ProcessInfo,
  ProcessRefused,
  ProcessRequest,
  type ProcessSignal
} from "../Driver.ts"
import type * as Cgroups from "./Cgroups.ts"
import { insideCommand, NOT_RUNNING_EXIT } from "./Exec.ts"
import {
  checkId,
  decodeInput,
  type DriverHost,
  errorMessage,
  invalid,
  type RunningSandbox,
  SANDBOX_PATH,
  tryHost
} from "./Host.ts"
import { spawn, type Spawned } from "./Spawner.ts"
import type { SandboxRecord } from "./State.ts"

/** Output kept per stream of a background process (the contract's "last 1 MiB of each stream"). */
export const KEEP_BYTES = 1024 * 1024
/**
 * Output kept for all of a sandbox's background processes together: what one sandbox makes the
 * agent hold (64 running processes could otherwise keep 128 MiB, and exited ones as much again).
 */
export const KEEP_BYTES_PER_SANDBOX = 16 * 1024 * 1024
/** Background processes running at once in one sandbox. */
export const MAX_RUNNING = 64
/** Exited background processes kept per sandbox (the oldest go first) and for how long. */
export const MAX_EXITED = 16
const KEEP_EXITED_MS = 15 * 60_000
/** Output still in the pipes after the process ended is read for this long (leftover children may hold them). */
const DRAIN_MS = 30
/** How long a start waits for the command to report its pid. */
const START_TIMEOUT_MS = 30_000
/** A streamed exec stops reading its pipes while this much output waits for its reader. */
const STREAM_HIGH_WATER = 1024 * 1024
/** How long a stop waits for its sandbox's processes to be reported ended. */
const STOP_WAIT_MS = 5_000

const signalNumbers: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGSEGV: 11,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGTERM: 15,
  SIGSYS: 31
}

const exitCodeOf = (code: number | null, signal: NodeJS.Signals | null) =>
  code ?? (signal !== null ? 128 + (signalNumbers[signal] ?? 0) : 255)

/**
 * What the agent keeps for one sandbox's background processes, and the bytes of output that
 * is, all its streams together (`dropped` once the sandbox is deleted: nothing more is kept).
 */
interface SandboxOutput {
  readonly entries: Map<number, Entry>
  bytes: number
  dropped: boolean
}

/** Output bytes kept per sandbox, for every driver of this process (read by `outputBytesKept`). */
const kept = new Map<string, SandboxOutput>()

/**
 * The bytes of background-process output this process keeps for a sandbox (all of them without
 * an id): at most `KEEP_BYTES_PER_SANDBOX` each, and none once the sandbox is deleted.
 */
export const outputBytesKept = (sandboxId?: string): number =>
  sandboxId !== undefined
    ? (kept.get(sandboxId)?.bytes ?? 0)
    : [...kept.values()].reduce((sum, output) => sum + output.bytes, 0)

/** The last `KEEP_BYTES` of a stream, as numbered chunks (numbers order both streams together). */
class Ring {
  readonly chunks: Array<{ seq: number; bytes: Uint8Array }> = []
  size = 0
  readonly output: SandboxOutput
  constructor(output: SandboxOutput) {
    this.output = output
  }
  push(seq: number, bytes: Uint8Array) {
    if (this.output.dropped) return
    this.chunks.push({ seq, bytes })
    this.size += bytes.length
    this.output.bytes += bytes.length
    if (this.size > KEEP_BYTES) this.trim(this.size - KEEP_BYTES)
    if (this.output.bytes > KEEP_BYTES_PER_SANDBOX) evictOver(this.output)
  }
  /** Drops the oldest `n` bytes. */
  trim(n: number) {
    const target = Math.max(0, this.size - n)
    while (this.size > target) {
      const first = this.chunks[0]!
      const over = this.size - target
      if (first.bytes.length <= over) {
        this.chunks.shift()
        this.size -= first.bytes.length
        this.output.bytes -= first.bytes.length
      } else {
        // A copy: a view would keep the whole chunk it came from.
        first.bytes = first.bytes.slice(over)
        this.size -= over
        this.output.bytes -= over
      }
    }
  }
  clear() {
    this.trim(this.size)
  }
}

/** An entry goes, with the output it kept. */
const forgetEntry = (output: SandboxOutput, e: Entry) => {
  output.entries.delete(e.pid)
  e.out.clear()
  e.err.clear()
}

/**
 * A sandbox over `KEEP_BYTES_PER_SANDBOX`: exited processes go, the oldest first; then the
 * streams that kept the most lose their oldest bytes, until it is within.
 */
const evictOver = (output: SandboxOutput) => {
  const exited = [...output.entries.values()].filter((e) => e.exitedAt !== null)
  exited.sort((a, b) => a.exitedAt!.getTime() - b.exitedAt!.getTime())
  for (const e of exited) {
    if (output.bytes <= KEEP_BYTES_PER_SANDBOX) return
    forgetEntry(output, e)
  }
  // Rings of running processes, and of one not yet in the map (its pid is not known yet).
  while (output.bytes > KEEP_BYTES_PER_SANDBOX) {
    let largest: Ring | undefined
    for (const ring of rings(output)) if (largest === undefined || ring.size > largest.size) largest = ring
    if (largest === undefined || largest.size === 0) return
    largest.trim(Math.min(largest.size, output.bytes - KEEP_BYTES_PER_SANDBOX))
  }
}

/** Every ring that keeps bytes of the sandbox (starting processes' included). */
const rings = (output: SandboxOutput): Array<Ring> => [
  ...[...output.entries.values()].flatMap((e) => [e.out, e.err]),
  ...(starting.get(output) ?? [])
]

/** Rings of processes whose pid is not known yet (not in the map). */
const starting = new WeakMap<SandboxOutput, Set<Ring>>()

interface Entry {
  readonly pid: number
  readonly cmd: ReadonlyArray<string>
  readonly startedAt: Date
  readonly child: Spawned
  readonly group: Cgroups.ExecGroup
  readonly stdin: Writable | undefined
  readonly out: Ring
  readonly err: Ring
  exitCode: number | null
  exitedAt: Date | null
  reason: ProcessEndReason | null
  /** The sandbox is stopping: whatever ends it now, its end says so. */
  stopping: boolean
  readonly listeners: Set<(event: ProcessEvent) => void>
  readonly exited: Promise<void>
}

const infoOf = (e: Entry) =>
  new ProcessInfo({
    pid: e.pid,
    cmd: [...e.cmd],
    state: e.exitedAt === null ? "running" : "exited",
    exitCode: e.exitCode,
    startedAt: e.startedAt.toISOString(),
    exitedAt: e.exitedAt?.toISOString() ?? null,
    reason: e.reason
  })

const exitEvent = (e: Entry): ProcessEvent => ({
  _tag: "Exit",
  exitCode: e.exitCode ?? 255,
  durationMs: (e.exitedAt?.getTime() ?? Date.now()) - e.startedAt.getTime(),
  reason: e.reason ?? "exited"
})

/** What a process has written so far, both streams in the order they came. */
const keptEvents = (e: Entry): Array<ProcessEvent> => {
  const all = [
    ...e.out.chunks.map((c) => ({ ...c, stream: "stdout" as const })),
    ...e.err.chunks.map((c) => ({ ...c, stream: "stderr" as const }))
  ].sort((a, b) => a.seq - b.seq)
  return all.map((c) => ({ _tag: "Output", stream: c.stream, bytes: c.bytes }))
}

/** The first line a readable gives (at most 64 bytes), or undefined when it ends first. */
const firstLine = (readable: Readable, timeoutMs: number) =>
  new Promise<string | undefined>((resolve) => {
    let text = ""
    const done = (value: string | undefined) => {
      clearTimeout(timer)
      readable.off("data", onData)
      readable.off("end", onEnd)
      readable.off("close", onEnd)
      readable.off("error", onEnd)
      resolve(value)
    }
    const onData = (chunk: Buffer) => {
      text += chunk.toString("latin1")
      const nl = text.indexOf("\n")
      if (nl >= 0) done(text.slice(0, nl))
      else if (text.length > 64) done(undefined)
    }
    const onEnd = () => done(undefined)
    const timer = setTimeout(() => done(undefined), timeoutMs)
    readable.on("data", onData)
    readable.once("end", onEnd)
    readable.once("close", onEnd)
    readable.once("error", onEnd)
  })

export const makeProcesses = (host: DriverHost) => {
  /** This driver's sandboxes (their outputs are in `kept` too, for `outputBytesKept`). */
  const bySandbox = new Map<string, SandboxOutput>()

  /** The environment every command starts from (as exec's). */
  const sandboxEnv = (record: SandboxRecord, extra: Record<string, string> = {}) => ({
    PATH: SANDBOX_PATH,
    HOME: "/root",
    HOSTNAME: record.sandboxId,
    ...record.env,
    ...extra
  })

  /**
   * `svc-enter` for argv with `extra` options, started by the spawner in a process group of its
   * own, with the environment on fd 3 and one more pipe on fd 4 when asked
   * (`--report-fd`/`--control-fd`).
   */
  const spawnEntered = (
    entry: RunningSandbox,
    group: Cgroups.ExecGroup,
    argv: ReadonlyArray<string>,
    options: {
      readonly env: Record<string, string>
      readonly cwd: string
      readonly user?: string | undefined
      readonly stdin: boolean
      readonly extra: ReadonlyArray<string>
      /** One more pipe on fd 4: "out" for `--report-fd`, "in" for `--control-fd`. */
      readonly fd4?: "in" | "out"
    }
  ) => {
    const command = insideCommand(host, entry, group, argv, options)
    const at = command.args.indexOf("--")
    const args = [...command.args.slice(0, at), ...options.extra, ...command.args.slice(at)]
    return Effect.tryPromise({
      try: () =>
        spawn(command.file, args, {
          env: command.env,
          // The environment waits in a pipe on fd 3 (never on a command line).
          stdio: [
            options.stdin ? "in" : "ignore",
            "out",
            "out",
            { data: command.fd3 },
            ...(options.fd4 === undefined ? [] : [options.fd4])
          ]
        }),
      catch: (e) => {
        // A spawner that died after forking svc-enter never answered: its command may run on.
        group.kill()
        return new DriverFailure({ operation: "exec", message: `svc-enter: ${errorMessage(e)}` })
      }
    }).pipe(Effect.map((child) => {
      child.stdin?.on("error", () => undefined)
      child.stdout!.on("error", () => undefined)
      child.stderr!.on("error", () => undefined)
      const kill = () => {
        child.killGroup("SIGKILL")
        group.kill()
      }
      return { child, kill, fd4: options.fd4 === undefined ? undefined : (child.stdio[4] as Readable & Writable) }
    }))
  }

  /** A pids group of the command's own, made now (removed once its processes have ended). */
  const newGroup = (entry: RunningSandbox, kind: string) =>
    tryHost(
      "exec",
      () =>
        host.cgroups.execGroup(
          entry.record.sandboxId,
          `${kind}${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`
        )
    )

  // -------------------------------------------------------------------------------------------
  // Streamed exec

  const execStream = Effect.fn("SandboxDriver.execStream")(function*(sandboxId: string, input: DriverExecRequest) {
    const request = yield* decodeInput(DriverExecRequest, input)
    const entry = yield* host.lookupRunning(sandboxId)
    const group = yield* Effect.acquireRelease(
      newGroup(entry, "s"),
      (group) => tryHost("exec", () => group.remove()).pipe(Effect.ignore)
    )
    const started = performance.now()
    const { child, kill } = yield* Effect.acquireRelease(
      spawnEntered(entry, group, request.cmd, {
        env: sandboxEnv(entry.record, request.env),
        cwd: request.cwd ?? entry.record.workdir ?? "/",
        user: request.user ?? entry.record.user,
        stdin: request.stdin !== undefined,
        extra: []
      }),
      ({ child, kill }) =>
        Effect.sync(() => {
          // Closed before the command ended (the reader went away): it ends with it.
          if (child.exitCode === null && child.signalCode === null) kill()
          child.stdout?.destroy()
          child.stderr?.destroy()
          child.stdin?.destroy()
        })
    )
    if (request.stdin !== undefined && child.stdin) {
      child.stdin.end(typeof request.stdin === "string" ? Buffer.from(request.stdin, "utf8") : request.stdin)
    }
    let timer: NodeJS.Timeout | undefined
    if (request.timeoutMs !== undefined) timer = setTimeout(kill, request.timeoutMs)
    yield* Effect.addFinalizer(() => Effect.sync(() => clearTimeout(timer)))

    // Output waiting for the reader: past the mark both pipes pause until it is read.
    let waiting = 0
    const readables = [child.stdout!, child.stderr!]
    const events = Stream.callback<ProcessEvent>((queue) =>
      Effect.sync(() => {
        let open = 2
        let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined
        let drain: NodeJS.Timeout | undefined
        const finish = () => {
          if (exit === undefined) return
          clearTimeout(drain)
          clearTimeout(timer)
          for (const r of readables) r.removeAllListeners("data")
          Queue.offerUnsafe(queue, {
            _tag: "Exit",
            exitCode: exitCodeOf(exit.code, exit.signal),
            durationMs: performance.now() - started
          })
          Queue.endUnsafe(queue)
          exit = undefined
        }
        const on = (stream: "stdout" | "stderr", readable: Readable) => {
          readable.on("data", (chunk: Buffer) => {
            waiting += chunk.length
            if (waiting > STREAM_HIGH_WATER) { for (const r of readables) r.pause() }
            Queue.offerUnsafe(queue, { _tag: "Output", stream, bytes: new Uint8Array(chunk) })
          })
          readable.once("close", () => {
            open--
            if (open === 0) finish()
          })
        }
        on("stdout", child.stdout!)
        on("stderr", child.stderr!)
        let lost = false
        child.once("exit", (code, signal) => {
          if (lost) return
          exit = { code, signal }
          if (open === 0) return finish()
          // Background processes of the command may hold the pipes open: read what is there, then end.
          drain = setTimeout(finish, DRAIN_MS)
        })
        // The spawner died under it: it was killed, and so is what it started.
        child.once("error", () => {
          lost = true
          kill()
          exit = { code: 255, signal: null }
          finish()
        })
      })
    ).pipe(
      Stream.tap((event) =>
        Effect.sync(() => {
          if (event._tag !== "Output") return
          waiting -= event.bytes.length
          if (waiting <= STREAM_HIGH_WATER / 2) { for (const r of readables) r.resume() }
        })
      )
    )
    return events
  })

  // -------------------------------------------------------------------------------------------
  // Background processes

  const outputOf = (sandboxId: string) => {
    let output = bySandbox.get(sandboxId)
    if (output === undefined) {
      output = { entries: new Map(), bytes: 0, dropped: false }
      bySandbox.set(sandboxId, output)
      kept.set(sandboxId, output)
    }
    return output
  }

  /** The sandbox is deleted: everything kept for it goes (and nothing more is kept). */
  const dropOutput = (sandboxId: string) => {
    const output = bySandbox.get(sandboxId)
    if (output === undefined) return
    for (const e of output.entries.values()) forgetEntry(output, e)
    for (const ring of starting.get(output) ?? []) ring.clear()
    output.dropped = true
    bySandbox.delete(sandboxId)
    if (kept.get(sandboxId) === output) kept.delete(sandboxId)
  }

  /** Exited ones past their time, and past the count, go. */
  const prune = (output: SandboxOutput) => {
    const now = Date.now()
    const exited = [...output.entries.values()].filter((e) => e.exitedAt !== null)
    exited.sort((a, b) => a.exitedAt!.getTime() - b.exitedAt!.getTime())
    exited.forEach((e, i) => {
      if (now - e.exitedAt!.getTime() > KEEP_EXITED_MS || exited.length - i > MAX_EXITED) forgetEntry(output, e)
    })
  }

  const notFound = (sandboxId: string, pid: number) =>
    new ProcessRefused({ sandboxId, reason: "not_found", message: `no process ${pid} in this sandbox` })

  const find = (sandboxId: string, pid: number) =>
    Effect.gen(function*() {
      const id = yield* checkId(sandboxId)
      if (!Number.isSafeInteger(pid) || pid < 1) return yield* notFound(id, pid)
      const entry = bySandbox.get(id)?.entries.get(pid)
      if (entry === undefined) return yield* notFound(id, pid)
      return entry
    })

  const startProcess = Effect.fn("SandboxDriver.startProcess")(function*(sandboxId: string, input: ProcessRequest) {
    const request = yield* decodeInput(ProcessRequest, input)
    const running = yield* host.lookupRunning(sandboxId)
    const id = running.record.sandboxId
    const output = outputOf(id)
    const entries = output.entries
    prune(output)
    if ([...entries.values()].filter((e) => e.exitedAt === null).length >= MAX_RUNNING) {
      return yield* new ProcessRefused({
        sandboxId: id,
        reason: "limit",
        message: `the sandbox runs ${MAX_RUNNING} background processes, as many as allowed`
      })
    }
    const group = yield* newGroup(running, "p")
    const { child, fd4, kill } = yield* spawnEntered(running, group, request.cmd, {
      env: sandboxEnv(running.record, request.env),
      cwd: request.cwd ?? running.record.workdir ?? "/",
      user: request.user ?? running.record.user,
      stdin: request.stdin,
      extra: ["--report-fd", "4"],
      fd4: "out"
    }).pipe(Effect.tapError(() => tryHost("exec", () => group.remove()).pipe(Effect.ignore)))
    // Everything it writes is kept from the start, before its pid is known.
    const out = new Ring(output)
    const err = new Ring(output)
    const unnamed = starting.get(output) ?? new Set<Ring>()
    starting.set(output, unnamed)
    unnamed.add(out).add(err)
    const named = () => {
      unnamed.delete(out)
      unnamed.delete(err)
    }
    let target: Entry | undefined
    let seq = 0
    const onOutput = (stream: "stdout" | "stderr") => (chunk: Buffer) => {
      const bytes = new Uint8Array(chunk)
      ;(stream === "stdout" ? out : err).push(++seq, bytes)
      // Followers come once its pid is known; what came before is in the rings.
      if (target !== undefined) { for (const listener of target.listeners) listener({ _tag: "Output", stream, bytes }) }
    }
    child.stdout!.on("data", onOutput("stdout"))
    child.stderr!.on("data", onOutput("stderr"))
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
      // The spawner died under it: it was killed, and so is what it started.
      child.once("error", () => {
        kill()
        resolve({ code: 255, signal: null })
      })
      child.once("exit", (code, signal) => {
        const done = () => resolve({ code, signal })
        let open = 2
        const closed = () => {
          if (--open === 0) done()
        }
        if (child.stdout!.closed) closed()
        else child.stdout!.once("close", closed)
        if (child.stderr!.closed) closed()
        else child.stderr!.once("close", closed)
        setTimeout(done, DRAIN_MS).unref()
      })
    })

    const reported = yield* Effect.promise(() => firstLine(fd4!, START_TIMEOUT_MS)).pipe(
      Effect.onInterrupt(() => Effect.sync(() => (named(), out.clear(), err.clear())))
    )
    fd4!.destroy()
    const pid = reported === undefined ? NaN : Number(reported.trim())
    if (!Number.isSafeInteger(pid) || pid < 1) {
      // It never started: the sandbox went, or svc-enter refused the cwd.
      kill()
      const { code, signal } = yield* Effect.promise(() => exited)
      yield* tryHost("exec", () => group.remove()).pipe(Effect.ignore)
      const exitCode = exitCodeOf(code, signal)
      if (exitCode === NOT_RUNNING_EXIT) yield* host.lookupRunning(id)
      const message = Buffer.concat(err.chunks.map((c) => c.bytes)).toString("utf8").trim()
      named()
      out.clear()
      err.clear()
      return yield* invalid(message.length > 0 ? message.slice(0, 500) : `the process could not start (${exitCode})`)
    }

    const entry: Entry = {
      pid,
      cmd: request.cmd,
      startedAt: new Date(),
      child,
      group,
      stdin: child.stdin ?? undefined,
      out,
      err,
      exitCode: null,
      exitedAt: null,
      reason: null,
      stopping: false,
      listeners: new Set(),
      exited: exited.then(() => undefined)
    }
    // A pid the sandbox reused: the old record goes. A sandbox deleted meanwhile keeps nothing.
    const reused = entries.get(pid)
    if (reused !== undefined) forgetEntry(output, reused)
    named()
    if (output.dropped) {
      out.clear()
      err.clear()
    } else entries.set(pid, entry)
    target = entry
    void exited.then(async ({ code, signal }) => {
      entry.exitCode = exitCodeOf(code, signal)
      entry.exitedAt = new Date()
      entry.reason = entry.stopping ? "sandbox_stopped" : signal !== null ? "killed" : "exited"
      entry.stdin?.destroy()
      child.stdout?.destroy()
      child.stderr?.destroy()
      const event = exitEvent(entry)
      for (const listener of entry.listeners) listener(event)
      entry.listeners.clear()
      await group.remove().catch(() => undefined)
    })
    return infoOf(entry)
  })

  const processes = Effect.fn("SandboxDriver.processes")(function*(sandboxId: string) {
    const id = yield* checkId(sandboxId)
    const output = bySandbox.get(id)
    if (output === undefined) return []
    prune(output)
    return [...output.entries.values()]
      .sort((a, b) => b.startedAt.getTime() - a.startedAt.getTime() || b.pid - a.pid)
      .map(infoOf)
  })

  const processInfo = Effect.fn("SandboxDriver.process")(function*(sandboxId: string, pid: number) {
    return infoOf(yield* find(sandboxId, pid))
  })

  const processOutput = Effect.fn("SandboxDriver.processOutput")(
    function*(sandboxId: string, pid: number, follow: boolean) {
      const entry = yield* find(sandboxId, pid)
      // The snapshot and the subscription are taken together (one synchronous step): nothing is
      // missed or repeated between them.
      return Stream.callback<ProcessEvent>((queue) =>
        Effect.acquireRelease(
          Effect.sync(() => {
            for (const event of keptEvents(entry)) Queue.offerUnsafe(queue, event)
            if (entry.exitedAt !== null) {
              Queue.offerUnsafe(queue, exitEvent(entry))
              Queue.endUnsafe(queue)
              return undefined
            }
            if (!follow) {
              Queue.endUnsafe(queue)
              return undefined
            }
            const listener = (event: ProcessEvent) => {
              Queue.offerUnsafe(queue, event)
              if (event._tag === "Exit") Queue.endUnsafe(queue)
            }
            entry.listeners.add(listener)
            return listener
          }),
          (listener) => Effect.sync(() => listener !== undefined && entry.listeners.delete(listener))
        )
      )
    }
  )

  const exitedRefusal = (sandboxId: string, pid: number) =>
    new ProcessRefused({ sandboxId, reason: "exited", message: `process ${pid} has exited` })

  const processStdin = <E, R>(sandboxId: string, pid: number, body: Stream.Stream<Uint8Array, E, R>, close: boolean) =>
    Effect.gen(function*() {
      const entry = yield* find(sandboxId, pid)
      if (entry.exitedAt !== null) return yield* exitedRefusal(sandboxId, pid)
      const stdin = entry.stdin
      if (stdin === undefined || stdin.writableEnded || stdin.destroyed) {
        return yield* new ProcessRefused({
          sandboxId,
          reason: "exited",
          message: `process ${pid} takes no more input (started without stdin, or its stdin was closed)`
        })
      }
      yield* Stream.runForEach(body, (chunk) =>
        Effect.callback<void>((resume) => {
          if (stdin.destroyed) return resume(Effect.void)
          if (stdin.write(chunk)) return resume(Effect.void)
          const done = () => {
            stdin.off("drain", done)
            stdin.off("close", done)
            resume(Effect.void)
          }
          stdin.once("drain", done)
          stdin.once("close", done)
          return Effect.sync(() => {
            stdin.off("drain", done)
            stdin.off("close", done)
          })
        }))
      if (close) stdin.end()
    }).pipe(Effect.withSpan("SandboxDriver.processStdin"))

  const signalProcess = Effect.fn("SandboxDriver.signalProcess")(
    function*(sandboxId: string, pid: number, signal: ProcessSignal) {
      const entry = yield* find(sandboxId, pid)
      if (entry.exitedAt !== null) return yield* exitedRefusal(sandboxId, pid)
      if (signal === "KILL") {
        // KILL cannot be passed on: the process's group is killed whole, svc-enter with it.
        entry.group.kill()
        return
      }
      // svc-enter passes it on to the process (its own pid is the host's).
      try {
        entry.child.kill(`SIG${signal}`)
      } catch {
        // It ended meanwhile: its exit says how.
      }
    }
  )

  /** Before a stop or a delete: the processes' ends will say so. Then waits for them to end. */
  const sandboxStopping = (sandboxId: string) =>
    Effect.sync(() => {
      const output = bySandbox.get(sandboxId)
      if (output === undefined) return []
      const running = [...output.entries.values()].filter((e) => e.exitedAt === null)
      for (const e of running) e.stopping = true
      return running
    })

  const awaitEnded = (running: ReadonlyArray<Entry>) =>
    running.length === 0 ? Effect.void : Effect.promise(() => Promise.all(running.map((e) => e.exited))).pipe(
      Effect.timeout(STOP_WAIT_MS),
      Effect.ignore
    )

  /** Wraps a stop or delete of the sandbox. */
  const aroundStop = <A, E, R>(sandboxId: string, stop: Effect.Effect<A, E, R>, forget: boolean) =>
    Effect.gen(function*() {
      const running = yield* sandboxStopping(sandboxId)
      const result = yield* stop.pipe(
        Effect.onError(() => Effect.sync(() => running.forEach((e) => (e.stopping = false))))
      )
      // Anything of it still running was outside its cgroups: it ends now.
      yield* awaitEnded(running)
      for (const e of running) if (e.exitedAt === null) e.group.kill()
      if (forget) dropOutput(sandboxId)
      return result
    })

  /** The agent stops: every background process ends (its output would have no reader). */
  const shutdown = Effect.gen(function*() {
    const all = [...bySandbox.values()].flatMap((o) => [...o.entries.values()]).filter((e) => e.exitedAt === null)
    for (const e of all) {
      e.group.kill()
      e.child.killGroup("SIGKILL")
    }
    yield* awaitEnded(all)
  })

  return {
    execStream,
    startProcess,
    processes,
    process: processInfo,
    processOutput,
    processStdin,
    signalProcess,
    aroundStop,
    shutdown,
    spawnEntered,
    newGroup,
    sandboxEnv
  }
}

export type Processes = ReturnType<typeof makeProcesses>
