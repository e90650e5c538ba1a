/**
 * The agent's journal: one small file per sandbox of this host, `<dataDir>/agent/journal/<id>.json`,
 * naming the lifecycle operation in progress (`pending`), or none.
 *
 * Why: a create, start, stop or destroy killed halfway (kill -9, power cut) leaves a sandbox in
 * a state the driver alone cannot tell from a finished one (a started init without its network,
 * say). The rule that makes recovery exact:
 *
 *   write `pending: op` → driver operation → write `pending: null` (or remove) → publish the
 *   report → ack the command.
 *
 * So a `pending` entry found at start-up means that no report of that command was published and
 * the command is still in the durable consumer: the agent undoes the half-made operation
 * (`Reconcile.ts`) and the redelivered command does it again and reports. An entry without
 * `pending` is settled: its sandbox's real state can be reported.
 *
 * Writes go through a temporary file and a rename (never half a file). They are not fsync'ed:
 * the journal must survive the agent's process dying, which the page cache does; a machine
 * that loses power loses its running sandboxes anyway. So `get`, `put` and `remove` never wait
 * on the disk and are made synchronously: through the thread pool a `put` was four hops (open,
 * write, close, rename), 1.5 ms of a create's time each on a busy host.
 */
import { DriverSandboxId } from "@svc/host/Driver"
import { Context, Effect, Layer, Schema } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { AgentConfig } from "./Config.ts"

export const PendingOp = Schema.Literals(["create", "start", "stop", "destroy"])
export type PendingOp = typeof PendingOp.Type

export class JournalEntry extends Schema.Class<JournalEntry>("@svc/agent/JournalEntry")({
  sandboxId: DriverSandboxId,
  orgId: Schema.String,
  pending: Schema.NullOr(PendingOp),
  /** ms since the epoch of the last write. */
  updatedAt: Schema.Number
}) {}

export class JournalError extends Schema.TaggedError<JournalError>()("JournalError", {
  operation: Schema.String,
  message: Schema.String
}) {}

const EntryJson = Schema.fromJsonString(JournalEntry)
const decodeEntry = Schema.decodeUnknownSync(EntryJson)
const encodeEntry = Schema.encodeSync(EntryJson)

const isSandboxId = Schema.is(DriverSandboxId)

export class Journal extends Context.Service<Journal, {
  readonly dir: string
  get(sandboxId: string): Effect.Effect<JournalEntry | undefined, JournalError>
  put(entry: JournalEntry): Effect.Effect<void, JournalError>
  remove(sandboxId: string): Effect.Effect<void, JournalError>
  /** Every readable entry; a damaged file is skipped (and left for `remove`). */
  readonly list: Effect.Effect<ReadonlyArray<JournalEntry>, JournalError>
}>()("@svc/agent/Journal") {
  static readonly make = Effect.fn("Journal.make")(function*(dir: string) {
    const attempt = <A>(operation: string, f: () => Promise<A>) =>
      Effect.tryPromise({
        try: f,
        catch: (e) => new JournalError({ operation, message: e instanceof Error ? e.message : String(e) })
      })
    yield* attempt("init", () => Fs.mkdir(dir, { recursive: true, mode: 0o700 }))

    const fileOf = (sandboxId: string) =>
      isSandboxId(sandboxId)
        ? Effect.succeed(NodePath.join(dir, `${sandboxId}.json`))
        : Effect.fail(
          new JournalError({
            operation: "path",
            message: `not a sandbox id: ${JSON.stringify(sandboxId).slice(0, 80)}`
          })
        )

    const attemptSync = <A>(operation: string, f: () => A) =>
      Effect.try({
        try: f,
        catch: (e) => new JournalError({ operation, message: e instanceof Error ? e.message : String(e) })
      })

    const read = (file: string): JournalEntry | undefined => {
      let text: string
      try {
        text = FsSync.readFileSync(file, "utf8")
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined
        throw e
      }
      try {
        return decodeEntry(text)
      } catch {
        return undefined
      }
    }

    let counter = 0
    const get = (sandboxId: string) => Effect.flatMap(fileOf(sandboxId), (file) => attemptSync("get", () => read(file)))
    const put = (entry: JournalEntry) =>
      Effect.flatMap(fileOf(entry.sandboxId), (file) =>
        attemptSync("put", () => {
          const temp = `${file}.tmp-${process.pid}-${++counter}`
          FsSync.writeFileSync(temp, encodeEntry(entry), { mode: 0o600 })
          FsSync.renameSync(temp, file)
        }))
    const remove = (sandboxId: string) =>
      Effect.flatMap(fileOf(sandboxId), (file) => attemptSync("remove", () => FsSync.rmSync(file, { force: true })))
    const list = attempt("list", async () => {
      const names = await Fs.readdir(dir)
      const entries: Array<JournalEntry> = []
      for (const name of names) {
        if (!name.endsWith(".json")) {
          // A temporary file of a write that died before its rename.
          if (name.includes(".json.tmp-")) await Fs.rm(NodePath.join(dir, name), { force: true })
          continue
        }
        const entry = await read(NodePath.join(dir, name))
        if (entry !== undefined && `${entry.sandboxId}.json` === name) entries.push(entry)
      }
      return entries
    })
    return Journal.of({ dir, get, put, remove, list })
  })

  /** In `<dataDir>/agent/journal` of the configured host. */
  static readonly layer = Layer.effect(
    Journal,
    Effect.gen(function*() {
      const config = yield* AgentConfig
      return yield* Journal.make(NodePath.join(config.dataDir, "agent", "journal"))
    })
  )
}
