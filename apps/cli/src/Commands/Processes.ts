/**
 * `svc sandbox spawn|ps|logs|kill|terminal`: a sandbox's background processes and its terminal
 * (docs/contract.md#sandbox-processes, #terminal).
 *
 *   svc sandbox spawn sbx_... -- python3 -m http.server 8000
 *   svc sandbox ps sbx_...
 *   svc sandbox logs sbx_... 42 --follow
 *   svc sandbox kill sbx_... 42 --signal INT
 *   svc sandbox terminal sbx_...
 *
 * `terminal` puts the user's terminal in raw mode, sends every key as it is, follows the window's
 * size (SIGWINCH) and exits with the shell's exit code. The key goes in the Authorization
 * header (the API also takes `?token=` there, for browsers; a URL ends up in logs).
 */
import { WebSocket } from "@effect/platform-node/NodeWS"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import type * as Http from "node:http"
import { CliError, credentials, request } from "../Client.ts"

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const sandboxId = Argument.String("sandbox-id").pipe(Argument.withDescription("The sandbox's id (sbx_...)"))
const pid = Argument.Int("pid").pipe(Argument.withDescription("The process's pid, as `svc sandbox ps` shows it"))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))

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
    stdin: Flag.Boolean("stdin").pipe(Flag.withDescription("Keep its stdin open"), Flag.withDefault(false)),
    json
  },
  Effect.fn(function*(o) {
    const started = yield* request("POST", `/v1/sandboxes/${o.sandboxId}/processes`, {
      cmd: o.cmd,
      ...(Option.isSome(o.cwd) ? { cwd: o.cwd.value } : {}),
      ...(Option.isSome(o.env) ? { env: o.env.value } : {}),
      ...(o.stdin ? { stdin: true } : {})
    })
    if (o.json) return yield* print(started)
    yield* Console.log(String(started.pid))
  })
).pipe(Command.withDescription("Start a background process in a running sandbox; prints its pid"))

const ps = Command.make(
  "ps",
  { sandboxId, json },
  Effect.fn(function*(o) {
    const list = yield* request("GET", `/v1/sandboxes/${o.sandboxId}/processes`)
    if (o.json) return yield* print(list)
    for (const p of list.processes) {
      const status = p.state === "running" ? "running" : `exited ${p.exit_code} (${p.reason})`
      yield* Console.log([String(p.pid).padStart(6), status.padEnd(28), p.cmd.join(" ")].join("  "))
    }
  })
).pipe(Command.withDescription("List a sandbox's background processes (running, and exited ones kept)"))

/** Server-sent events of `path` as they come, to `onEvent`. */
const readEvents = (path: string, onEvent: (event: string, data: any) => void) =>
  Effect.gen(function*() {
    const creds = yield* credentials
    const response = yield* Effect.tryPromise({
      try: () =>
        fetch(creds.baseUrl.replace(/\/+$/, "") + path, {
          headers: { authorization: `Bearer ${creds.apiKey}`, accept: "text/event-stream" }
        }),
      catch: (cause) => new CliError({ message: `cannot reach ${creds.baseUrl}: ${String(cause)}` })
    })
    if (!response.ok) {
      const text = yield* Effect.promise(() => response.text())
      let body: any
      try {
        body = JSON.parse(text)
      } catch {
        body = undefined
      }
      return yield* new CliError({
        message: `error ${body?.code ?? response.status}: ${body?.error ?? text.slice(0, 300)}`
      })
    }
    yield* Effect.tryPromise({
      try: async () => {
        const decoder = new TextDecoder()
        let buffer = ""
        for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
          buffer += decoder.decode(chunk, { stream: true })
          let at: number
          while ((at = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, at)
            buffer = buffer.slice(at + 2)
            let event = "message"
            let data = ""
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) event = line.slice(6).trim()
              else if (line.startsWith("data:")) data += line.slice(5).trim()
            }
            if (data !== "") onEvent(event, JSON.parse(data))
          }
        }
      },
      catch: (cause) => new CliError({ message: `the stream was cut: ${String(cause)}` })
    })
  })

const logs = Command.make(
  "logs",
  {
    sandboxId,
    pid,
    follow: Flag.Boolean("follow").pipe(
      Flag.withAlias("f"),
      Flag.withDescription("Keep printing what it writes until it exits"),
      Flag.withDefault(false)
    )
  },
  Effect.fn(function*(o) {
    yield* readEvents(
      `/v1/sandboxes/${o.sandboxId}/processes/${o.pid}/output${o.follow ? "?follow=true" : ""}`,
      (event, data) => {
        if (event === "stdout") process.stdout.write(Buffer.from(data.data, "base64"))
        else if (event === "stderr") process.stderr.write(Buffer.from(data.data, "base64"))
        else if (event === "exit") process.stderr.write(`[exited ${data.exit_code}: ${data.reason ?? "exited"}]\n`)
        else if (event === "error") process.stderr.write(`[${data.code}: ${data.error}]\n`)
      }
    )
  })
).pipe(Command.withDescription("Print a background process's output (the last 1 MiB of each stream kept)"))

const kill = Command.make(
  "kill",
  {
    sandboxId,
    pid,
    signal: Flag.Literals("signal", ["INT", "TERM", "KILL", "HUP"]).pipe(
      Flag.withAlias("s"),
      Flag.withDefault("TERM" as const)
    )
  },
  Effect.fn(function*(o) {
    yield* request("POST", `/v1/sandboxes/${o.sandboxId}/processes/${o.pid}/signal`, { signal: o.signal })
    yield* Console.log(`SIG${o.signal} sent to ${o.pid}`)
  })
).pipe(Command.withDescription("Send a signal to a background process (default TERM; KILL ends what it started too)"))

/** The user's terminal size, or 80x24 when it is not a terminal. */
const size = () => ({ cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 })

const terminal = Command.make(
  "terminal",
  { sandboxId },
  Effect.fn(function*(o) {
    const creds = yield* credentials
    const { cols, rows } = size()
    const url = `${creds.baseUrl.replace(/\/+$/, "").replace(/^http/, "ws")}/terminal?sandbox_id=${
      encodeURIComponent(o.sandboxId)
    }&cols=${cols}&rows=${rows}`
    const code = yield* Effect.callback<number, CliError>((resume) => {
      const ws = new WebSocket(url, { headers: { authorization: `Bearer ${creds.apiKey}` } })
      const stdin = process.stdin
      let exitCode: number | undefined
      let raw = false
      const onKeys = (chunk: Buffer) => ws.send(chunk, { binary: true })
      const onResize = () => ws.send(JSON.stringify({ type: "resize", ...size() }))
      const restore = () => {
        stdin.off("data", onKeys)
        process.off("SIGWINCH", onResize)
        if (raw && stdin.isTTY) stdin.setRawMode(false)
        stdin.pause()
      }
      ws.on("unexpected-response", (_request: Http.ClientRequest, response: Http.IncomingMessage) => {
        let text = ""
        response.on("data", (c: Buffer) => (text += c.toString("utf8")))
        response.on("end", () => {
          let body: any
          try {
            body = JSON.parse(text)
          } catch {
            body = undefined
          }
          resume(Effect.fail(
            new CliError({
              message: `error ${body?.code ?? response.statusCode}: ${body?.error ?? text.slice(0, 300)}`
            })
          ))
        })
      })
      ws.on("error", (e: Error) => {
        restore()
        resume(Effect.fail(new CliError({ message: `cannot reach ${creds.baseUrl}: ${e.message}` })))
      })
      ws.on("open", () => {
        if (stdin.isTTY) {
          stdin.setRawMode(true)
          raw = true
        }
        stdin.on("data", onKeys)
        stdin.resume()
        process.on("SIGWINCH", onResize)
      })
      ws.on("message", (data: Buffer, isBinary: boolean) => {
        if (isBinary) return void process.stdout.write(data)
        try {
          const message = JSON.parse(data.toString("utf8")) as { type?: string; code?: number }
          if (message.type === "exit" && typeof message.code === "number") exitCode = message.code
        } catch {
          // Not ours to show.
        }
      })
      ws.on("close", (closeCode: number, reason: Buffer) => {
        restore()
        if (exitCode !== undefined) return resume(Effect.succeed(exitCode))
        resume(Effect.fail(new CliError({ message: `the terminal closed (${closeCode} ${reason.toString()})` })))
      })
      return Effect.sync(() => {
        restore()
        ws.terminate()
      })
    })
    process.exitCode = code
  })
).pipe(Command.withDescription("An interactive shell in a running sandbox; exits with the shell's exit code"))

export const processCommands = [spawn, ps, logs, kill, terminal] as const
