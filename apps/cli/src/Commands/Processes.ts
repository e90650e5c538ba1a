/**
 * `svc sandbox spawn|ps|logs|kill|wait|stdin|terminal`: a sandbox's background processes and
 * its terminal (docs/contract.md#sandbox-processes, #terminal), through the SDK's
 * `sandbox.processes` and `sandbox.terminal()`.
 *
 *   svc sandbox spawn sbx_... -- python3 -m http.server 8000
 *   svc sandbox ps sbx_...            # or one: svc sandbox ps sbx_... 42
 *   svc sandbox logs sbx_... 42 --follow   # without a pid: the sandbox's own log (SandboxTelemetry.ts)
 *   svc sandbox kill sbx_... 42 --signal INT
 *   svc sandbox wait sbx_... 42       # exits with its exit code
 *   echo data | svc sandbox stdin sbx_... 42 --close
 *   svc sandbox terminal sbx_...
 *
 * `terminal` puts the user's terminal in raw mode, sends every key as it is, follows the window's
 * size (SIGWINCH) and exits with the shell's exit code.
 */
import type { Process, Sandbox, Svc, Terminal } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { call, client, cliErrorOf } from "../Client.ts"
import { printSandboxLog, sinceFlag } from "./SandboxTelemetry.ts"

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const sandboxId = Argument.String("sandbox-id").pipe(Argument.withDescription("The sandbox's id (sbx_...)"))
const pid = Argument.Int("pid").pipe(Argument.withDescription("The process's pid, as `svc sandbox ps` shows it"))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))

/** A sandbox's processes (its record read first: a missing sandbox is `not_found` at once). */
const processesOf = (svc: Svc, id: string) => svc.sandboxes.get(id).then((s: Sandbox) => s.processes)

const line = (p: Process["record"]) => {
  const status = p.state === "running" ? "running" : `exited ${p.exit_code} (${p.reason})`
  return [String(p.pid).padStart(6), status.padEnd(28), p.cmd.join(" ")].join("  ")
}

const spawn = Command.make(
  "spawn",
  {
    sandboxId,
    cmd: Argument.String("cmd").pipe(
      Argument.variadic({ min: 1 }),
      Argument.withDescription("The program and its arguments (after --)")
    ),
    cwd: Flag.String("cwd").pipe(Flag.optional),
    env: Flag.KeyValuePair("env").pipe(Flag.withDescription("KEY=VALUE, repeatable"), Flag.optional),
    stdin: Flag.Boolean("stdin").pipe(
      Flag.withDescription("Keep its stdin open (svc sandbox stdin)"),
      Flag.withDefault(false)
    ),
    json
  },
  Effect.fn(function*(o) {
    const started = yield* call(async (svc) =>
      (await processesOf(svc, o.sandboxId)).start(o.cmd, {
        cwd: Option.getOrUndefined(o.cwd),
        env: Option.getOrUndefined(o.env),
        ...(o.stdin ? { stdin: true } : {})
      })
    )
    if (o.json) return yield* print(started.record)
    yield* Console.log(String(started.pid))
  })
).pipe(Command.withDescription("Start a background process in a running sandbox; prints its pid"))

const ps = Command.make(
  "ps",
  {
    sandboxId,
    pid: Argument.Int("pid").pipe(Argument.withDescription("Only this process"), Argument.optional),
    json
  },
  Effect.fn(function*(o) {
    const only = o.pid
    if (Option.isSome(only)) {
      const one = yield* call(async (svc) => (await processesOf(svc, o.sandboxId)).get(only.value))
      return yield* o.json ? print(one.record) : Console.log(line(one.record))
    }
    const list = yield* call(async (svc) => (await processesOf(svc, o.sandboxId)).list())
    if (o.json) return yield* print({ processes: list.map((p) => p.record) })
    for (const p of list) yield* Console.log(line(p.record))
  })
).pipe(Command.withDescription("List a sandbox's background processes (running, and exited ones kept), or one"))

const logs = Command.make(
  "logs",
  {
    sandboxId,
    pid: Argument.Int("pid").pipe(
      Argument.withDescription("A background process's pid; without it, the sandbox's own log"),
      Argument.optional
    ),
    follow: Flag.Boolean("follow").pipe(
      Flag.withAlias("f"),
      Flag.withDescription("Keep printing what it writes (a process: until it exits)"),
      Flag.withDefault(false)
    ),
    since: sinceFlag
  },
  Effect.fn(function*(o) {
    const svc = yield* client
    if (Option.isNone(o.pid)) return yield* printSandboxLog(svc, o.sandboxId, o)
    const pid = o.pid.value
    // Each chunk is written before the next is read: a slow terminal slows the stream, no more.
    yield* Effect.tryPromise({
      try: async (signal) => {
        const processes = await processesOf(svc, o.sandboxId)
        for await (const chunk of processes.output(pid, { follow: o.follow, signal })) {
          if (chunk.type === "exit") {
            process.stderr.write(`[exited ${chunk.exit_code}: ${chunk.reason ?? "exited"}]\n`)
          } else {
            const out = chunk.type === "stdout" ? process.stdout : process.stderr
            if (!out.write(chunk.data)) await new Promise((resolve) => out.once("drain", resolve))
          }
        }
      },
      catch: (e) => cliErrorOf(e, svc.baseUrl)
    })
  })
).pipe(
  Command.withDescription(
    "Print the sandbox's log (lifecycle, start_cmd output), or with a pid a background process's output (the last 1 MiB of each stream kept)"
  )
)

const kill = Command.make(
  "kill",
  {
    sandboxId,
    pid,
    signal: Flag.Literals("signal", ["INT", "TERM", "KILL", "HUP"]).pipe(
      Flag.withAlias("s"),
      Flag.withDefault("TERM" as const)
    ),
    json
  },
  Effect.fn(function*(o) {
    yield* call(async (svc) => (await processesOf(svc, o.sandboxId)).kill(o.pid, o.signal))
    if (o.json) return yield* print({ pid: o.pid, signal: o.signal, sent: true })
    yield* Console.log(`SIG${o.signal} sent to ${o.pid}`)
  })
).pipe(Command.withDescription("Send a signal to a background process (default TERM; KILL ends what it started too)"))

const wait = Command.make(
  "wait",
  { sandboxId, pid, json },
  Effect.fn(function*(o) {
    const exited = yield* call(async (svc) => (await processesOf(svc, o.sandboxId)).wait(o.pid))
    if (o.json) yield* print(exited.record)
    else yield* Console.log(line(exited.record))
    process.exitCode = exited.exitCode ?? 1
  })
).pipe(Command.withDescription("Wait until a background process exits; exits with its exit code"))

const stdin = Command.make(
  "stdin",
  {
    sandboxId,
    pid,
    close: Flag.Boolean("close").pipe(
      Flag.withDescription("End its stdin afterwards (end of file)"),
      Flag.withDefault(false)
    ),
    json
  },
  Effect.fn(function*(o) {
    const data = yield* Effect.promise(async () => {
      const parts: Array<Buffer> = []
      for await (const part of process.stdin) parts.push(part as Buffer)
      return new Uint8Array(Buffer.concat(parts))
    })
    yield* call(async (svc) => (await processesOf(svc, o.sandboxId)).writeStdin(o.pid, data, { close: o.close }))
    if (o.json) return yield* print({ pid: o.pid, bytes: data.length, closed: o.close })
  })
).pipe(
  Command.withDescription("Send this command's stdin to a background process started with --stdin (1 MiB at most)")
)

/** The user's terminal size, or 80x24 when it is not a terminal. */
const size = () => ({ cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 })

const terminal = Command.make(
  "terminal",
  { sandboxId },
  Effect.fn(function*(o) {
    const svc = yield* client
    const opened = yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).terminal(size()))
    const code = yield* Effect.callback<number, ReturnType<typeof cliErrorOf>>((resume) => {
      const t: Terminal = opened
      const stdin = process.stdin
      const onKeys = (chunk: Buffer) => t.write(new Uint8Array(chunk))
      const onResize = () => {
        const { cols, rows } = size()
        t.resize(cols, rows)
      }
      if (stdin.isTTY) stdin.setRawMode(true)
      t.onData((bytes) => process.stdout.write(bytes))
      stdin.on("data", onKeys)
      stdin.resume()
      process.on("SIGWINCH", onResize)
      const restore = () => {
        stdin.off("data", onKeys)
        process.off("SIGWINCH", onResize)
        if (stdin.isTTY) stdin.setRawMode(false)
        stdin.pause()
      }
      t.exited.then(
        (exitCode) => {
          restore()
          resume(Effect.succeed(exitCode))
        },
        (e) => {
          restore()
          resume(Effect.fail(cliErrorOf(e, svc.baseUrl)))
        }
      )
      return Effect.sync(() => {
        restore()
        t.close()
      })
    })
    process.exitCode = code
  })
).pipe(Command.withDescription("An interactive shell in a running sandbox; exits with the shell's exit code"))

export const processCommands = [spawn, ps, logs, kill, wait, stdin, terminal] as const
