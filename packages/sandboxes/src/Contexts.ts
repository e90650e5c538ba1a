/**
 * Code contexts through the control plane (docs/contract.md#code-contexts), built on the
 * sandbox's exec and background processes, so an interpreter is the sandbox's own process,
 * charged and bounded as any other:
 *
 * - Create writes the runner (`Contexts/kernel.py`, standard library only) into the sandbox's
 *   `/tmp/.svc-contexts` and starts `python3 kernel.py serve <socket>` as a background process.
 *   Its namespace lives as long as that process.
 * - A run execs the same script as a client (`run <socket> <timeout_ms>`, the code on stdin): it
 *   hands the code to the interpreter over the Unix socket and prints its JSON answer, which the
 *   exec brings back (within exec's 1 MiB output; the runner keeps far less of each stream).
 * - Interrupt is SIGINT to the interpreter (a `KeyboardInterrupt` in the run); delete kills it.
 * - The records are this API process's memory (one API process serves a sandbox's contexts): a
 *   restarted API forgets them, their interpreters end with the sandbox.
 *
 * `python` only for now: `javascript` and `bash` are refused with 409 naming that.
 */
import type * as Rows from "@svc/db/Rows"
import type { CodeContext, ContextLanguage, RunEvent, RunResult } from "@svc/domain/Api/Contexts"
import { MAX_CONTEXTS_PER_SANDBOX } from "@svc/domain/Api/Contexts"
import * as Errors from "@svc/domain/Errors"
import type { OrgId } from "@svc/domain/Ids"
import { makeBody } from "@svc/domain/Ids"
import { EXEC_TIMEOUT_MS_DEFAULT } from "@svc/domain/Sandbox"
import type * as AgentClient from "@svc/hosts/AgentClient"
import { Context, Effect, Layer, Schema, Semaphore, Stream } from "effect"
import * as Fs from "node:fs"
import { type ProcessError, Processes } from "./Processes.ts"
import { Sandboxes } from "./Sandboxes.ts"

export type ContextError = ProcessError | AgentClient.ExecError | Rows.QueryError

/** The runner, shipped into each sandbox that gets a context. */
const KERNEL = Fs.readFileSync(new URL("./Contexts/kernel.py", import.meta.url), "utf8")
const DIR = "/tmp/.svc-contexts"
const KERNEL_PATH = `${DIR}/kernel.py`
/** What the exec of a run may take beyond the run's own limit (starting the client, answering). */
const RUN_MARGIN_MS = 10_000

/** The interpreter's answer, as the runner prints it. */
const Answer = Schema.Struct({
  execution_count: Schema.Int,
  results: Schema.Array(Schema.Struct({ type: Schema.String, data: Schema.String })),
  stdout: Schema.String,
  stderr: Schema.String,
  error: Schema.NullOr(
    Schema.Struct({ name: Schema.String, value: Schema.String, traceback: Schema.Array(Schema.String) })
  ),
  duration_ms: Schema.Int,
  truncated: Schema.Boolean,
  exited: Schema.Boolean
})
const decodeAnswer = Schema.decodeUnknownOption(Schema.fromJsonString(Answer))

interface Entry {
  readonly id: string
  readonly language: ContextLanguage
  readonly cwd: string
  readonly createdAt: string
  readonly pid: string
  readonly socket: string
  /** One run at a time, in order. */
  readonly lock: Semaphore.Semaphore
  running: boolean
  dead: boolean
}

const recordOf = (e: Entry): CodeContext => ({
  id: e.id,
  language: e.language,
  cwd: e.cwd,
  state: e.dead ? "dead" : e.running ? "running" : "idle",
  createdAt: e.createdAt
})

const missing = (what: string) =>
  new Errors.Conflict({ error: `This sandbox's image has no ${what}: a context needs it` })

export class Contexts extends Context.Service<Contexts, {
  readonly create: (
    orgId: OrgId,
    id: string,
    request: {
      readonly language: ContextLanguage
      readonly cwd?: string | undefined
      readonly env?: Readonly<Record<string, string>> | undefined
    }
  ) => Effect.Effect<CodeContext, ContextError>
  readonly list: (orgId: OrgId, id: string) => Effect.Effect<ReadonlyArray<CodeContext>, ContextError>
  readonly get: (orgId: OrgId, id: string, ctx: string) => Effect.Effect<CodeContext, ContextError>
  readonly run: (
    orgId: OrgId,
    id: string,
    ctx: string,
    code: string,
    timeoutMs: number | undefined
  ) => Effect.Effect<RunResult, ContextError>
  /** The run as events while it goes (`RunEvent`s: stdout, stderr, result, error, end). */
  readonly runStream: (
    orgId: OrgId,
    id: string,
    ctx: string,
    code: string,
    timeoutMs: number | undefined
  ) => Effect.Effect<Stream.Stream<RunEvent>, ContextError>
  readonly interrupt: (orgId: OrgId, id: string, ctx: string) => Effect.Effect<void, ContextError>
  readonly remove: (orgId: OrgId, id: string, ctx: string) => Effect.Effect<void, ContextError>
}>()("@svc/sandboxes/Contexts") {
  static readonly make = Effect.gen(function*() {
    const sandboxes = yield* Sandboxes
    const processes = yield* Processes
    /** Sandbox id → its contexts. */
    const bySandbox = new Map<string, Map<string, Entry>>()

    const entryOf = (id: string, ctx: string) => {
      const entry = bySandbox.get(id)?.get(ctx)
      return entry === undefined
        ? Effect.fail(new Errors.NotFound({ error: `No context ${ctx.slice(0, 64)} in this sandbox` }))
        : Effect.succeed(entry)
    }

    /** Whether its interpreter still runs (the sandbox stopped, killed, exited: dead). */
    const refresh = (orgId: OrgId, id: string, entry: Entry) =>
      Effect.gen(function*() {
        if (entry.dead) return entry
        const process = yield* processes.get(orgId, id, entry.pid).pipe(
          Effect.catchTag("NotFound", () => Effect.succeed(undefined))
        )
        if (process === undefined || process.state !== "running") entry.dead = true
        return entry
      })

    const create = Effect.fn("Contexts.create")(function*(
      orgId: OrgId,
      id: string,
      request: {
        readonly language: ContextLanguage
        readonly cwd?: string | undefined
        readonly env?: Readonly<Record<string, string>> | undefined
      }
    ) {
      if (request.language !== "python") {
        return yield* new Errors.Conflict({
          error: `${request.language} contexts are not available yet on this platform; python is`
        })
      }
      const mine = bySandbox.get(id) ?? new Map<string, Entry>()
      if (mine.size >= MAX_CONTEXTS_PER_SANDBOX) {
        return yield* new Errors.Conflict({
          error: `A sandbox holds at most ${MAX_CONTEXTS_PER_SANDBOX} contexts; delete one first`
        })
      }
      // One exec: is python3 there, where would it start, and the runner put in place.
      const placed = yield* sandboxes.exec(orgId, id, {
        cmd: [
          "sh",
          "-c",
          `command -v python3 >/dev/null || exit 127; pwd; mkdir -p ${DIR} && cat > ${KERNEL_PATH}.new && ` +
          `mv ${KERNEL_PATH}.new ${KERNEL_PATH}`
        ],
        ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
        stdin: KERNEL,
        timeout_ms: 30_000
      })
      if (placed.exit_code === 127) return yield* missing("python3")
      if (placed.exit_code !== 0) {
        return yield* new Errors.Conflict({
          error: `The context could not be prepared in the sandbox: ${placed.stderr.slice(0, 300)}`
        })
      }
      const ctx = `ctx_${makeBody(Date.now())}`
      const socket = `${DIR}/${ctx}.sock`
      const started = yield* processes.start(orgId, id, {
        cmd: ["python3", KERNEL_PATH, "serve", socket],
        ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
        ...(request.env !== undefined ? { env: request.env } : {})
      })
      const entry: Entry = {
        id: ctx,
        language: request.language,
        cwd: request.cwd ?? (placed.stdout.trim() || "/"),
        createdAt: new Date().toISOString(),
        pid: String(started.pid),
        socket,
        lock: Semaphore.makeUnsafe(1),
        running: false,
        dead: false
      }
      mine.set(ctx, entry)
      bySandbox.set(id, mine)
      return recordOf(entry)
    })

    const list = Effect.fn("Contexts.list")(function*(orgId: OrgId, id: string) {
      const out: Array<CodeContext> = []
      for (const entry of bySandbox.get(id)?.values() ?? []) out.push(recordOf(yield* refresh(orgId, id, entry)))
      return out
    })

    const get = Effect.fn("Contexts.get")(function*(orgId: OrgId, id: string, ctx: string) {
      return recordOf(yield* refresh(orgId, id, yield* entryOf(id, ctx)))
    })

    const dead = (ctx: string) =>
      new Errors.Conflict({ error: `Context ${ctx} is dead (its interpreter ended); create another` })

    const run = Effect.fn("Contexts.run")(function*(
      orgId: OrgId,
      id: string,
      ctx: string,
      code: string,
      timeoutMs: number | undefined
    ) {
      const entry = yield* entryOf(id, ctx)
      const limit = timeoutMs ?? EXEC_TIMEOUT_MS_DEFAULT
      return yield* entry.lock.withPermits(1)(Effect.gen(function*() {
        if ((yield* refresh(orgId, id, entry)).dead) return yield* dead(ctx)
        entry.running = true
        const done = yield* sandboxes.exec(orgId, id, {
          cmd: ["python3", KERNEL_PATH, "run", entry.socket, String(limit)],
          stdin: code,
          timeout_ms: limit + RUN_MARGIN_MS
        }).pipe(Effect.ensuring(Effect.sync(() => entry.running = false)))
        if (done.exit_code === 3 || done.exit_code === 4) {
          entry.dead = true
          return yield* dead(ctx)
        }
        const answer = decodeAnswer(done.stdout)
        if (answer._tag === "None") {
          return yield* new Errors.Unavailable({
            error: `The context's runner did not answer (exit ${done.exit_code}): ${done.stderr.slice(0, 300)}`
          })
        }
        const { exited, ...result } = answer.value
        if (exited) entry.dead = true
        return { ...result, duration_ms: Math.max(0, result.duration_ms) }
      }))
    })

    const runStream = Effect.fn("Contexts.runStream")(function*(
      orgId: OrgId,
      id: string,
      ctx: string,
      code: string,
      timeoutMs: number | undefined
    ) {
      const entry = yield* entryOf(id, ctx)
      const limit = timeoutMs ?? EXEC_TIMEOUT_MS_DEFAULT
      // The permit is held until the stream ends: runs of one context stay in order.
      yield* entry.lock.take(1)
      const release = Effect.suspend(() => {
        entry.running = false
        return Effect.asVoid(entry.lock.release(1))
      })
      const events = yield* Effect.gen(function*() {
        if ((yield* refresh(orgId, id, entry)).dead) return yield* dead(ctx)
        entry.running = true
        return yield* processes.execStream(orgId, id, {
          cmd: ["python3", KERNEL_PATH, "stream", entry.socket, String(limit)],
          stdin: code,
          timeout_ms: limit + RUN_MARGIN_MS
        })
      }).pipe(Effect.onError(() => release))
      const decoder = new TextDecoder()
      let pending = ""
      let ended = false
      // The runner's lines (JSON events) out of the exec's stdout chunks.
      const convert = (event: { readonly event: string; readonly data: string }): Array<RunEvent> => {
        try {
          return converted(event)
        } catch {
          return [{
            event: "error",
            data: JSON.stringify({ error: "The context's runner answered out of form", code: "unavailable" })
          }]
        }
      }
      const converted = (event: { readonly event: string; readonly data: string }): Array<RunEvent> => {
        if (event.event === "stdout") {
          pending += decoder.decode(Buffer.from(JSON.parse(event.data).data, "base64"), { stream: true })
          const lines = pending.split("\n")
          pending = lines.pop()!
          return lines.filter((line) => line.length > 0).map((line) => {
            const { event: name, exited, ...rest } = JSON.parse(line)
            if (name === "end") {
              ended = true
              if (exited === true) entry.dead = true
            }
            return { event: name, data: JSON.stringify(rest) }
          })
        }
        if (event.event === "exit" && !ended) {
          const { exit_code } = JSON.parse(event.data)
          if (exit_code === 3 || exit_code === 4) entry.dead = true
          return [{
            event: "error",
            data: JSON.stringify(
              entry.dead
                ? { error: `Context ${ctx} is dead (its interpreter ended)`, code: "conflict" }
                : { error: "The context's runner did not answer", code: "unavailable" }
            )
          }]
        }
        return event.event === "error" ? [{ event: "error", data: event.data }] : []
      }
      return events.pipe(
        Stream.flatMap((event) => Stream.fromIterable(convert(event))),
        Stream.ensuring(release)
      )
    })

    const interrupt = Effect.fn("Contexts.interrupt")(function*(orgId: OrgId, id: string, ctx: string) {
      const entry = yield* refresh(orgId, id, yield* entryOf(id, ctx))
      if (entry.dead) return yield* dead(ctx)
      // Only while a run is under way: the runner keeps an early one for the run on its way to it.
      if (entry.running) yield* processes.signal(orgId, id, entry.pid, "INT")
    })

    const remove = Effect.fn("Contexts.remove")(function*(orgId: OrgId, id: string, ctx: string) {
      const entry = yield* entryOf(id, ctx)
      bySandbox.get(id)?.delete(ctx)
      if (!entry.dead) {
        // Its interpreter may have ended already, or its sandbox stopped: gone either way.
        yield* processes.signal(orgId, id, entry.pid, "KILL").pipe(
          Effect.catchTags({ Conflict: () => Effect.void, NotFound: () => Effect.void })
        )
      }
    })

    return Contexts.of({ create, list, get, run, runStream, interrupt, remove })
  })

  /** Needs `Sandboxes` and `Processes`. */
  static readonly layer = Layer.effect(Contexts, Contexts.make)
}
