/**
 * Code contexts through the control plane (docs/contract.md#code-contexts), built on the
 * sandbox's exec and background processes, so an interpreter is the sandbox's own process,
 * charged and bounded as any other:
 *
 * - Create writes the language's runner into the sandbox's `/tmp/.svc-contexts` and starts it as a
 *   background process: `Contexts/kernel.py` (standard library only) for python (`serve`) and bash
 *   (`serve-bash`: one `bash` it feeds, so bash contexts need python3 too), `Contexts/kernel.cjs`
 *   (node's own modules, a node REPL server) for javascript. Its state lives as long as that process.
 * - A run execs `svc-ctx` (`packages/host/native/svc-ctx.c`, the helper the driver binds into every
 *   sandbox beside busybox) with the run's JSON request on stdin: it hands the request to the
 *   interpreter over the Unix socket and prints its JSON answer, which the exec brings back
 *   (within exec's 1 MiB output; the runner keeps far less of each stream). A static client that
 *   starts in a millisecond, not a second python3 or node per run (hundreds of milliseconds on a
 *   busy machine: the bulk of a run's round trip).
 * - A run's hot path is one exec and three statements: the context's row read (404 before waiting
 *   for the context's turn), in its turn one `UPDATE … RETURNING` that marks it running and reads
 *   it again (a dead one refused), and one that marks it idle once the answer is in. Whether the
 *   interpreter still runs is asked of the agent only when the client could not reach it or the
 *   exec failed (an interpreter gone leaves its socket refusing: the client says so within a
 *   second), not before every run.
 * - Interrupt is SIGINT to the interpreter (a `KeyboardInterrupt` in the run); delete kills it.
 * - The records are rows of `code_contexts` (packages/db/src/migrations/0630_code_contexts.ts),
 *   so any API process serves any context and a restart forgets none; they go with their
 *   sandbox's deletion. The 16 per sandbox are counted under the sandbox's row lock, in the
 *   insert's transaction. The execution count is the interpreter's own (it answers it).
 * - The interpreter is known by its pid and the agent's `startedAt` for it: a pid the sandbox
 *   reused for another process does not pass for the interpreter (the context is dead).
 *
 * An image without what the language needs (`python3`; `node`; `bash` and `python3`): 409 naming it.
 */
import * as Rows from "@svc/db/Rows"
import type { CodeContext, ContextLanguage, RunEvent, RunResult } from "@svc/domain/Api/Contexts"
import { MAX_CONTEXTS_PER_SANDBOX } from "@svc/domain/Api/Contexts"
import * as Errors from "@svc/domain/Errors"
import type { OrgId } from "@svc/domain/Ids"
import { makeBody } from "@svc/domain/Ids"
import { EXEC_TIMEOUT_MS_DEFAULT } from "@svc/domain/Sandbox"
import type * as AgentClient from "@svc/hosts/AgentClient"
import { Context, Effect, Layer, Option, Schema, Semaphore, Stream } from "effect"
import { SqlClient } from "effect/sql"
import * as Fs from "node:fs"
import { type ProcessError, Processes } from "./Processes.ts"
import { Sandboxes } from "./Sandboxes.ts"

export type ContextError = ProcessError | AgentClient.ExecError | Rows.QueryError

/** The runners, shipped into each sandbox that gets a context. */
const KERNEL_PY = Fs.readFileSync(new URL("./Contexts/kernel.py", import.meta.url), "utf8")
const KERNEL_JS = Fs.readFileSync(new URL("./Contexts/kernel.cjs", import.meta.url), "utf8")
const DIR = "/tmp/.svc-contexts"

/** What a language's context needs in the image, its runner, and how it is served and called. */
interface Runner {
  readonly needs: ReadonlyArray<string>
  readonly file: string
  readonly source: string
  readonly interpreter: string
  readonly serve: string
}
const RUNNERS: Record<ContextLanguage, Runner> = {
  python: { needs: ["python3"], file: `${DIR}/kernel.py`, source: KERNEL_PY, interpreter: "python3", serve: "serve" },
  javascript: { needs: ["node"], file: `${DIR}/kernel.cjs`, source: KERNEL_JS, interpreter: "node", serve: "serve" },
  bash: {
    needs: ["bash", "python3"],
    file: `${DIR}/kernel.py`,
    source: KERNEL_PY,
    interpreter: "python3",
    serve: "serve-bash"
  }
}
/** The context client inside every sandbox (the driver's helper folder, `packages/host/src/Driver/Host.ts`). */
const CLIENT = "/dev/.svc/svc-ctx"
/** The client's command for a run of `language` with this limit (javascript's gets a SIGINT past it). */
const clientCmd = (entry: { readonly language: ContextLanguage; readonly socket: string }, limit: number) => [
  CLIENT,
  entry.socket,
  String(limit),
  entry.language === "javascript" ? "1" : "0"
]
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

/** A `code_contexts` row. */
const ContextRow = Schema.Struct({
  id: Schema.String,
  language: Schema.Literals(["python", "javascript", "bash"]),
  cwd: Schema.String,
  socket: Schema.String,
  pid: Schema.Int,
  pid_started_at: Schema.String,
  running: Schema.Boolean,
  dead: Schema.Boolean,
  created_at: Rows.Timestamptz
})
type ContextRow = typeof ContextRow.Type
const COLUMNS = "id, language, cwd, socket, pid, pid_started_at, running, dead, created_at"

interface Entry {
  readonly id: string
  readonly language: ContextLanguage
  readonly cwd: string
  readonly createdAt: string
  readonly pid: string
  readonly pidStartedAt: string
  readonly socket: string
  running: boolean
  dead: boolean
}

const entryOfRow = (row: ContextRow): Entry => ({
  id: row.id,
  language: row.language,
  cwd: row.cwd,
  createdAt: row.created_at.toISOString(),
  pid: String(row.pid),
  pidStartedAt: row.pid_started_at,
  socket: row.socket,
  running: row.running,
  dead: row.dead
})

const recordOf = (e: Entry): CodeContext => ({
  id: e.id,
  language: e.language,
  cwd: e.cwd,
  state: e.dead ? "dead" : e.running ? "running" : "idle",
  createdAt: e.createdAt
})

const tooMany = () =>
  new Errors.Conflict({
    error: `A sandbox holds at most ${MAX_CONTEXTS_PER_SANDBOX} contexts; delete one first`
  })

const missing = (what: string, language: ContextLanguage) =>
  new Errors.Conflict({ error: `This sandbox's image has no ${what}: a ${language} context needs it` })

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
    const sql = yield* SqlClient.SqlClient
    /** One run at a time, in order, per context: this process's runs (the interpreter takes one at a time anyway). */
    const locks = new Map<string, Semaphore.Semaphore>()
    const lockOf = (ctx: string) => {
      let lock = locks.get(ctx)
      if (lock === undefined) locks.set(ctx, lock = Semaphore.makeUnsafe(1))
      return lock
    }

    const findOne = Rows.findOneOption("Contexts.get", {
      Request: Schema.Struct({ orgId: Schema.String, id: Schema.String, ctx: Schema.String }),
      Result: ContextRow,
      execute: ({ ctx, id, orgId }) =>
        sql`SELECT ${sql.literal(COLUMNS)} FROM code_contexts
            WHERE id = ${ctx} AND sandbox_id = ${id} AND org_id = ${orgId}`
    })
    const findAll = Rows.findAll("Contexts.list", {
      Request: Schema.Struct({ orgId: Schema.String, id: Schema.String }),
      Result: ContextRow,
      execute: ({ id, orgId }) =>
        sql`SELECT ${sql.literal(COLUMNS)} FROM code_contexts
            WHERE sandbox_id = ${id} AND org_id = ${orgId} ORDER BY created_at, id`
    })
    const counted = Rows.decoder("Contexts.count", Schema.Struct({ n: Schema.Int }))
    const held = Rows.decoder("Contexts.hold", Schema.Struct({ state: Schema.String }))

    const entryOf = (orgId: OrgId, id: string, ctx: string) =>
      Effect.flatMap(findOne({ orgId, id, ctx }), (row) =>
        Option.isNone(row)
          ? Effect.fail(new Errors.NotFound({ error: `No context ${ctx.slice(0, 64)} in this sandbox` }))
          : Effect.succeed(entryOfRow(row.value)))

    const setRunning = (entry: Entry, running: boolean) =>
      Effect.suspend(() => {
        entry.running = running
        return sql`UPDATE code_contexts SET running = ${running} WHERE id = ${entry.id}`
      }).pipe(Effect.asVoid)
    const setDead = (entry: Entry) =>
      Effect.suspend(() => {
        entry.dead = true
        return sql`UPDATE code_contexts SET dead = true, running = false WHERE id = ${entry.id}`
      }).pipe(Effect.asVoid)

    /**
     * Whether its interpreter still runs (the sandbox stopped, killed, exited, or its pid now
     * another process's: dead).
     */
    const refresh = (orgId: OrgId, id: string, entry: Entry) =>
      Effect.gen(function*() {
        if (entry.dead) return entry
        const process = yield* processes.get(orgId, id, entry.pid).pipe(
          Effect.catchTag("NotFound", () => Effect.succeed(undefined))
        )
        if (process === undefined || process.state !== "running" || process.startedAt !== entry.pidStartedAt) {
          yield* setDead(entry)
        }
        return entry
      })

    /** How many contexts the sandbox holds (a cheap early refusal; the insert counts again, locked). */
    const count = (orgId: OrgId, id: string) =>
      counted(sql`SELECT count(*)::int AS n FROM code_contexts WHERE sandbox_id = ${id} AND org_id = ${orgId}`).pipe(
        Effect.map((rows) => rows[0]?.n ?? 0)
      )

    const create = Effect.fn("Contexts.create")(function*(
      orgId: OrgId,
      id: string,
      request: {
        readonly language: ContextLanguage
        readonly cwd?: string | undefined
        readonly env?: Readonly<Record<string, string>> | undefined
      }
    ) {
      if ((yield* count(orgId, id)) >= MAX_CONTEXTS_PER_SANDBOX) return yield* tooMany()
      const runner = RUNNERS[request.language]
      // One exec: is what it needs there (the first missing one named), where would it start, and
      // the runner put in place (through a name of this shell's own: creates at the same time each
      // rename a whole file).
      const placed = yield* sandboxes.exec(orgId, id, {
        cmd: [
          "sh",
          "-c",
          `for p in ${runner.needs.join(" ")}; do command -v "$p" >/dev/null || { echo "$p"; exit 127; }; done; ` +
          `pwd; mkdir -p ${DIR} && cat > ${runner.file}.$$ && mv ${runner.file}.$$ ${runner.file}`
        ],
        ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
        stdin: runner.source,
        timeout_ms: 30_000
      })
      if (placed.exit_code === 127) {
        return yield* missing(placed.stdout.trim().slice(0, 64) || runner.needs.join(", "), request.language)
      }
      if (placed.exit_code !== 0) {
        return yield* new Errors.Conflict({
          error: `The context could not be prepared in the sandbox: ${placed.stderr.slice(0, 300)}`
        })
      }
      const ctx = `ctx_${makeBody(Date.now())}`
      const socket = `${DIR}/${ctx}.sock`
      const started = yield* processes.start(orgId, id, {
        cmd: [runner.interpreter, runner.file, runner.serve, socket],
        ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
        ...(request.env !== undefined ? { env: request.env } : {}),
        // Its runs are the activity, not the interpreter waiting for them.
        keepsAwake: false
      })
      const entry: Entry = {
        id: ctx,
        language: request.language,
        cwd: request.cwd ?? (placed.stdout.trim() || "/"),
        createdAt: new Date().toISOString(),
        pid: String(started.pid),
        pidStartedAt: started.startedAt,
        socket,
        running: false,
        dead: false
      }
      // The sandbox's row held to the commit: creates through any API process count one after
      // another, and a deletion (its transition updates that row) cannot slip between.
      const inserted = yield* sql.withTransaction(Effect.gen(function*() {
        const [sandbox] = yield* held(sql`
          SELECT state FROM sandboxes WHERE id = ${id} AND org_id = ${orgId} FOR NO KEY UPDATE`)
        if (sandbox === undefined || sandbox.state === "deleting" || sandbox.state === "deleted") return false
        const [mine] = yield* counted(sql`
          SELECT count(*)::int AS n FROM code_contexts WHERE sandbox_id = ${id} AND org_id = ${orgId}`)
        if ((mine?.n ?? 0) >= MAX_CONTEXTS_PER_SANDBOX) return false
        yield* sql`
          INSERT INTO code_contexts (id, org_id, sandbox_id, language, cwd, socket, pid, pid_started_at, created_at)
          VALUES (${ctx}, ${orgId}, ${id}, ${entry.language}, ${entry.cwd}, ${socket}, ${started.pid},
                  ${entry.pidStartedAt}, ${new Date(entry.createdAt)})`
        return true
      }))
      if (!inserted) {
        // Refused (the limit reached meanwhile, or the sandbox going): its interpreter goes too.
        yield* processes.signal(orgId, id, entry.pid, "KILL").pipe(Effect.ignore)
        return yield* tooMany()
      }
      return recordOf(entry)
    })

    const list = Effect.fn("Contexts.list")(function*(orgId: OrgId, id: string) {
      const out: Array<CodeContext> = []
      for (const row of yield* findAll({ orgId, id })) out.push(recordOf(yield* refresh(orgId, id, entryOfRow(row))))
      return out
    })

    const get = Effect.fn("Contexts.get")(function*(orgId: OrgId, id: string, ctx: string) {
      return recordOf(yield* refresh(orgId, id, yield* entryOf(orgId, id, ctx)))
    })

    const dead = (ctx: string) =>
      new Errors.Conflict({ error: `Context ${ctx} is dead (its interpreter ended); create another` })

    /** In the context's turn: marked running (unless dead) and read again, in one statement. */
    const marked = Rows.findOneOption("Contexts.begin", {
      Request: Schema.Struct({ orgId: Schema.String, id: Schema.String, ctx: Schema.String }),
      Result: ContextRow,
      execute: ({ ctx, id, orgId }) =>
        sql`UPDATE code_contexts SET running = NOT dead
            WHERE id = ${ctx} AND sandbox_id = ${id} AND org_id = ${orgId}
            RETURNING ${sql.literal(COLUMNS)}`
    })
    const begin = (orgId: OrgId, id: string, ctx: string) =>
      Effect.gen(function*() {
        const row = yield* marked({ orgId, id, ctx })
        if (Option.isNone(row)) {
          return yield* new Errors.NotFound({ error: `No context ${ctx.slice(0, 64)} in this sandbox` })
        }
        if (row.value.dead) return yield* dead(ctx)
        return entryOfRow(row.value)
      })

    /**
     * The client could not reach the interpreter (or the exec failed, e.g. the sandbox stopped):
     * asks the agent whether it still runs; dead → the context is dead, else the failure stands.
     */
    const unreached = <E>(orgId: OrgId, id: string, entry: Entry, failure: E) =>
      Effect.gen(function*() {
        const checked = yield* refresh(orgId, id, entry).pipe(Effect.orElseSucceed(() => entry))
        if (checked.dead) return yield* dead(entry.id)
        return yield* Effect.fail(failure)
      })

    const run = Effect.fn("Contexts.run")(function*(
      orgId: OrgId,
      id: string,
      ctx: string,
      code: string,
      timeoutMs: number | undefined
    ) {
      // A context that is not there is refused before waiting for its turn.
      yield* entryOf(orgId, id, ctx)
      const limit = timeoutMs ?? EXEC_TIMEOUT_MS_DEFAULT
      return yield* lockOf(ctx).withPermits(1)(Effect.gen(function*() {
        const entry = yield* begin(orgId, id, ctx)
        const done = yield* sandboxes.exec(orgId, id, {
          cmd: clientCmd(entry, limit),
          stdin: JSON.stringify({ code, timeout_ms: limit, stream: false }),
          timeout_ms: limit + RUN_MARGIN_MS
        }).pipe(
          Effect.catch((e) => unreached(orgId, id, entry, e)),
          Effect.ensuring(Effect.suspend(() => entry.dead ? Effect.void : Effect.ignore(setRunning(entry, false))))
        )
        if (done.exit_code === 3 || done.exit_code === 4) {
          yield* setDead(entry)
          return yield* dead(ctx)
        }
        const answer = decodeAnswer(done.stdout)
        if (answer._tag === "None") {
          return yield* new Errors.Unavailable({
            error: `The context's runner did not answer (exit ${done.exit_code}): ${done.stderr.slice(0, 300)}`
          })
        }
        const { exited, ...result } = answer.value
        if (exited) yield* setDead(entry)
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
      // A context that is not there is refused before waiting for its turn.
      yield* entryOf(orgId, id, ctx)
      const limit = timeoutMs ?? EXEC_TIMEOUT_MS_DEFAULT
      const lock = lockOf(ctx)
      // The permit is held until the stream ends: runs of one context stay in order.
      yield* lock.take(1)
      const entry = yield* begin(orgId, id, ctx).pipe(Effect.onError(() => lock.release(1)))
      let died = false
      const release = Effect.suspend(() =>
        (died ? setDead(entry) : setRunning(entry, false)).pipe(
          Effect.ignore,
          Effect.andThen(lock.release(1)),
          Effect.asVoid
        )
      )
      const events = yield* processes.execStream(orgId, id, {
        cmd: clientCmd(entry, limit),
        stdin: JSON.stringify({ code, timeout_ms: limit, stream: true }),
        timeout_ms: limit + RUN_MARGIN_MS
      }).pipe(
        Effect.catch((e) => unreached(orgId, id, entry, e)),
        Effect.onError(() => release)
      )
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
              if (exited === true) died = true
            }
            return { event: name, data: JSON.stringify(rest) }
          })
        }
        if (event.event === "exit" && !ended) {
          const { exit_code } = JSON.parse(event.data)
          if (exit_code === 3 || exit_code === 4) died = true
          return [{
            event: "error",
            data: JSON.stringify(
              died
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
      const entry = yield* refresh(orgId, id, yield* entryOf(orgId, id, ctx))
      if (entry.dead) return yield* dead(ctx)
      // Only while a run is under way: the runner keeps an early one for the run on its way to it.
      if (entry.running) yield* processes.signal(orgId, id, entry.pid, "INT")
    })

    const remove = Effect.fn("Contexts.remove")(function*(orgId: OrgId, id: string, ctx: string) {
      const entry = yield* entryOf(orgId, id, ctx)
      yield* sql`DELETE FROM code_contexts WHERE id = ${ctx} AND sandbox_id = ${id} AND org_id = ${orgId}`
      locks.delete(ctx)
      // Not its pid if the sandbox reused it: then the interpreter is gone already.
      if (!(yield* refresh(orgId, id, entry)).dead) {
        // Its interpreter may have ended already, or its sandbox stopped: gone either way.
        yield* processes.signal(orgId, id, entry.pid, "KILL").pipe(
          Effect.catchTags({ Conflict: () => Effect.void, NotFound: () => Effect.void })
        )
      }
    })

    return Contexts.of({ create, list, get, run, runStream, interrupt, remove })
  })

  /** Needs `Sandboxes`, `Processes` and `SqlClient`. */
  static readonly layer = Layer.effect(Contexts, Contexts.make)
}
