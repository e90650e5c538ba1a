/**
 * `svc sandbox run`: code in a sandbox's code context (docs/contract.md#code-contexts), through
 * the SDK's `sandbox.contexts`.
 *
 *   svc sandbox run sbx_... --language python analysis.py
 *   echo 'ls; cd /tmp' | svc sandbox run sbx_... --language bash -
 *   svc sandbox run sbx_... --context ctx_... - <<< 'df.describe()'
 *   svc sandbox run sbx_... plot.py --out-dir ./figures
 *
 * Without `--context` a new context of `--language` is made and kept: its id is printed on stderr
 * so later runs can continue in it. The run's stdout and stderr go to the CLI's; each result
 * after them: `text/plain` on stdout, an image (or HTML, JSON) as a note with its size on stderr,
 * or saved under `--out-dir` as `<context>-<run>-<n>.<ext>`. A run that raised prints its
 * traceback on stderr and exits 1.
 */
import type { RunResult } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Fs from "node:fs"
import * as NodePath from "node:path"
import { call, CliError } from "../Client.ts"

const sandboxId = Argument.String("sandbox-id").pipe(Argument.withDescription("The sandbox's id (sbx_...)"))

/** File extensions of the result types saved under `--out-dir`. */
const EXTENSIONS: Record<string, string> = {
  "image/png": "png",
  "text/html": "html",
  "application/json": "json"
}

const readCode = (file: string) =>
  Effect.try({
    try: () => Fs.readFileSync(file === "-" ? 0 : file, "utf8"),
    catch: (e) => new CliError({ message: `error: cannot read ${file}: ${e instanceof Error ? e.message : String(e)}` })
  })

/** A result's bytes: base64 for images, the text otherwise. */
const bytesOf = (type: string, data: string) =>
  type.startsWith("image/") ? Buffer.from(data, "base64") : Buffer.from(data, "utf8")

const run = Command.make(
  "run",
  {
    sandboxId,
    file: Argument.String("file").pipe(
      Argument.withDescription("The code: a file, or - (the default) for stdin"),
      Argument.withDefault("-")
    ),
    language: Flag.Literals("language", ["python", "javascript", "bash"]).pipe(
      Flag.withAlias("l"),
      Flag.withDescription("The new context's language (without --context)"),
      Flag.withDefault("python" as const)
    ),
    context: Flag.String("context").pipe(
      Flag.withDescription("Run in this context (ctx_...) instead of a new one"),
      Flag.optional
    ),
    timeoutMs: Flag.Int("timeout-ms").pipe(Flag.withDescription("The run's time limit"), Flag.optional),
    outDir: Flag.String("out-dir").pipe(
      Flag.withDescription("Save images, HTML and JSON results in this folder"),
      Flag.optional
    ),
    json: Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))
  },
  Effect.fn(function*(o) {
    const code = yield* readCode(o.file)
    const { contextId, result } = yield* call(async (svc) => {
      const sandbox = await svc.sandboxes.get(o.sandboxId)
      const context = Option.isSome(o.context)
        ? await sandbox.contexts.get(o.context.value)
        : await sandbox.contexts.create({ language: o.language })
      if (Option.isNone(o.context)) {
        process.stderr.write(
          `context ${context.id} (${context.record.language}): --context ${context.id} runs in it again\n`
        )
      }
      const result: RunResult = await context.run(code, { timeoutMs: Option.getOrUndefined(o.timeoutMs) })
      return { contextId: context.id, result }
    })
    if (o.json) {
      yield* Console.log(JSON.stringify(result, null, 2))
    } else {
      process.stdout.write(result.stdout)
      process.stderr.write(result.stderr)
      let n = 0
      for (const item of result.results) {
        n += 1
        if (item.type === "text/plain") {
          process.stdout.write(`${item.data}\n`)
          continue
        }
        const bytes = bytesOf(item.type, item.data)
        if (Option.isSome(o.outDir)) {
          const dir = o.outDir.value
          const path = NodePath.join(
            dir,
            `${contextId}-${result.execution_count}-${n}.${EXTENSIONS[item.type] ?? "bin"}`
          )
          yield* Effect.try({
            try: () => {
              Fs.mkdirSync(dir, { recursive: true })
              Fs.writeFileSync(path, bytes)
            },
            catch: (e) => new CliError({ message: `error: cannot write ${path}: ${String(e)}` })
          })
          process.stderr.write(`[${item.type}: ${bytes.length} bytes saved to ${path}]\n`)
        } else {
          process.stderr.write(`[${item.type}: ${bytes.length} bytes; --out-dir saves it]\n`)
        }
      }
      if (result.truncated) process.stderr.write("[output truncated: the run printed more than a run keeps]\n")
      if (result.error !== null) {
        const trace = result.error.traceback.length > 0
          ? result.error.traceback.join("\n")
          : `${result.error.name}: ${result.error.value}`
        process.stderr.write(`${trace}\n`)
      }
    }
    if (result.error !== null) process.exitCode = 1
  })
).pipe(Command.withDescription("Run code in a sandbox's code context (python, javascript or bash); state persists"))

export const contextCommands = [run] as const
