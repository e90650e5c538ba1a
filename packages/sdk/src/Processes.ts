/**
 * A sandbox's background processes (`sandbox.processes`, docs/contract.md#sandbox-processes): commands that
 * outlive the request that started them, their kept output (the last 1 MiB of each stream) read
 * or followed as an async iterator, their stdin, signals. Also the parser of the output events
 * that streamed exec shares.
 */
import { chunks, fromBase64, type Http, type RequestBody, segment, SvcError, timeoutError } from "./Http.ts"
import { Refreshable } from "./Refreshable.ts"
import { sseMessages } from "./Sse.ts"
import type * as T from "./Types.ts"

export type ProcessSignal = "INT" | "TERM" | "KILL" | "HUP"

/**
 * One piece of a command's output as it was written (`stdout`, `stderr`: its bytes, in the
 * order written), then its `exit` (the last; `reason` for a background process: `exited`,
 * `killed`, `sandbox_stopped`).
 */
export type OutputChunk =
  | { readonly type: "stdout" | "stderr"; readonly data: Uint8Array }
  | {
    readonly type: "exit"
    readonly exit_code: number
    readonly duration_ms: number
    readonly reason: T.SandboxProcess["reason"]
  }

/**
 * The output events of a response (server-sent `stdout`/`stderr`/`exit`, docs/contract.md#sandbox-processes),
 * read as they are asked for: a slow consumer slows the stream (nothing is buffered ahead). An
 * `error` event (the sandbox's host stopped answering) is thrown as a SvcError.
 */
export async function* outputOf(response: Response): AsyncGenerator<OutputChunk> {
  for await (const message of sseMessages(chunks(response))) {
    const data = JSON.parse(message.data) as Record<string, unknown>
    if (message.event === "stdout" || message.event === "stderr") {
      yield { type: message.event, data: fromBase64(String(data["data"])) }
    } else if (message.event === "exit") {
      const reason = data["reason"]
      yield {
        type: "exit",
        exit_code: Number(data["exit_code"]),
        duration_ms: Number(data["duration_ms"] ?? 0),
        reason: reason === "exited" || reason === "killed" || reason === "sandbox_stopped" ? reason : null
      }
    } else if (message.event === "error") {
      throw new SvcError({
        status: 0,
        code: String(data["code"] ?? "unavailable"),
        message: String(data["error"] ?? "the output stream ended with an error")
      })
    }
  }
}

export interface StartProcessOptions {
  readonly cwd?: string | undefined
  readonly env?: Readonly<Record<string, string>> | undefined
  /** Keep its stdin open for `writeStdin` (default false: it reads end of file). */
  readonly stdin?: boolean | undefined
}

export interface OutputOptions {
  /** Keep the stream open with what it writes next until it exits (default false: what is kept so far). */
  readonly follow?: boolean | undefined
  /** Stops the stream (as leaving the `for await` loop does). */
  readonly signal?: AbortSignal | undefined
}

/** A background process: its record as of the last answer, and what can be done with it. */
export class Process extends Refreshable<T.SandboxProcess> {
  readonly #processes: Processes

  constructor(processes: Processes, record: T.SandboxProcess) {
    super(record)
    this.#processes = processes
  }

  get pid(): number {
    return this.record.pid
  }
  get exitCode(): number | null {
    return this.record.exit_code
  }

  protected async reread(): Promise<T.SandboxProcess> {
    return (await this.#processes.get(this.pid)).record
  }
  /** Sends a signal (default TERM; KILL ends it and everything it started). */
  kill(signal: ProcessSignal = "TERM"): Promise<void> {
    return this.#processes.kill(this.pid, signal)
  }
  /** Resolves once it has exited, with its record (`exit_code`, `reason`). */
  async wait(options: { readonly timeoutMs?: number | undefined } = {}): Promise<this> {
    return this.update((await this.#processes.wait(this.pid, options)).record)
  }
  output(options: OutputOptions = {}): AsyncGenerator<OutputChunk> {
    return this.#processes.output(this.pid, options)
  }
  logs(): Promise<ProcessLogs> {
    return this.#processes.logs(this.pid)
  }
  writeStdin(data: string | Uint8Array, options: { readonly close?: boolean | undefined } = {}): Promise<void> {
    return this.#processes.writeStdin(this.pid, data, options)
  }
  closeStdin(): Promise<void> {
    return this.#processes.closeStdin(this.pid)
  }
}

/** The output kept so far, as text. */
export interface ProcessLogs {
  readonly stdout: string
  readonly stderr: string
  /** Its exit, when it has exited. */
  readonly exit: Extract<OutputChunk, { type: "exit" }> | null
}

/** `sandbox.processes`: the background processes of one sandbox. */
export class Processes {
  readonly #http: Http
  readonly #sandboxId: string

  constructor(http: Http, sandboxId: string) {
    this.#http = http
    this.#sandboxId = sandboxId
  }

  #path(suffix = ""): string {
    return `/v1/sandboxes/${segment(this.#sandboxId)}/processes${suffix}`
  }

  /**
   * Starts a background process in the (running) sandbox; it outlives the call. `cmd` is argv
   * or a shell line (run as `sh -c`). 409 `conflict` unless the sandbox is running.
   */
  async start(cmd: string | ReadonlyArray<string>, options: StartProcessOptions = {}): Promise<Process> {
    const record: T.SandboxProcess = await this.#http.json("POST", this.#path(), {
      json: {
        cmd: typeof cmd === "string" ? ["sh", "-c", cmd] : cmd,
        ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
        ...(options.env !== undefined ? { env: options.env } : {}),
        ...(options.stdin !== undefined ? { stdin: options.stdin } : {})
      }
    })
    return new Process(this, record)
  }

  /** The running ones and those that exited lately, newest first. */
  async list(): Promise<ReadonlyArray<Process>> {
    const { processes } = await this.#http.json<{ processes: ReadonlyArray<T.SandboxProcess> }>("GET", this.#path())
    return processes.map((record) => new Process(this, record))
  }

  async get(pid: number): Promise<Process> {
    return new Process(this, await this.#http.json("GET", this.#path(`/${segment(pid)}`)))
  }

  /** Sends a signal (default TERM; KILL ends it and everything it started). 409 once it has exited. */
  async kill(pid: number, signal: ProcessSignal = "TERM"): Promise<void> {
    await this.#http.request("POST", this.#path(`/${segment(pid)}/signal`), { json: { signal } })
  }

  /**
   * Its output as it was written: what is kept so far, then (with `follow`) what comes, until it
   * exits; the last chunk is its `exit` when it has exited. Read only as fast as you consume it.
   */
  async *output(pid: number, options: OutputOptions = {}): AsyncGenerator<OutputChunk> {
    const response = await this.#http.request("GET", this.#path(`/${segment(pid)}/output`), {
      query: { follow: options.follow === true ? "true" : undefined },
      headers: { accept: "text/event-stream" },
      signal: options.signal
    })
    yield* outputOf(response)
  }

  /** The output kept so far (the last 1 MiB of each stream), as text. */
  async logs(pid: number): Promise<ProcessLogs> {
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() }
    const text = { stdout: "", stderr: "" }
    let exit: ProcessLogs["exit"] = null
    for await (const chunk of this.output(pid)) {
      if (chunk.type === "exit") exit = chunk
      else text[chunk.type] += decoders[chunk.type].decode(chunk.data, { stream: true })
    }
    return { stdout: text.stdout + decoders.stdout.decode(), stderr: text.stderr + decoders.stderr.decode(), exit }
  }

  /**
   * Resolves once it has exited, with its record: the followed output's end says so at once (its
   * bytes are skipped); if that stream breaks, the record is polled.
   */
  async wait(pid: number, options: { readonly timeoutMs?: number | undefined } = {}): Promise<Process> {
    const timeoutMs = options.timeoutMs ?? 300_000
    const abort = new AbortController()
    const timer = setTimeout(() => abort.abort(), timeoutMs)
    try {
      for await (const chunk of this.output(pid, { follow: true, signal: abort.signal })) {
        if (chunk.type === "exit") break
      }
    } catch (error) {
      if (abort.signal.aborted) throw timeoutError(`process ${pid} has not exited`, timeoutMs)
      // A refusal (no such process, another org's sandbox) is the answer; a cut stream is not.
      if (error instanceof SvcError && error.status >= 400 && error.status < 500) throw error
    } finally {
      clearTimeout(timer)
    }
    const deadline = Date.now() + timeoutMs
    for (let delay = 100;; delay = Math.min(delay * 2, 1000)) {
      const current = await this.get(pid)
      if (current.state === "exited") return current
      if (Date.now() + delay > deadline) throw timeoutError(`process ${pid} has not exited`, timeoutMs)
      await new Promise((resolve) => setTimeout(resolve, delay))
    }
  }

  /** Writes to its stdin (started with `stdin: true`); `close` then ends it (end of file). */
  async writeStdin(
    pid: number,
    data: string | Uint8Array,
    options: { readonly close?: boolean | undefined } = {}
  ): Promise<void> {
    await this.#http.request("POST", this.#path(`/${segment(pid)}/stdin`), {
      query: { close: options.close === true ? "true" : undefined },
      body: data as RequestBody,
      headers: { "content-type": "application/octet-stream" }
    })
  }

  /** Ends its stdin (end of file). */
  closeStdin(pid: number): Promise<void> {
    return this.writeStdin(pid, new Uint8Array(0), { close: true })
  }
}
