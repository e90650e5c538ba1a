/**
 * `svc.sandboxes` and the `Sandbox` object: create (resolving once running), get, list; a
 * sandbox's commands (exec, whole or streamed), files, processes, terminal, lifecycle and
 * settings.
 */
import { tarFolder, untarInto } from "./Archive.ts"
import { Contexts } from "./Contexts.ts"
import { waitThrough } from "./Events.ts"
import {
  chunks,
  DEFAULT_WAIT_MS,
  type Http,
  idempotency,
  type ListOptions,
  type Page,
  type RequestBody,
  segment,
  SvcError,
  type WaitOptions
} from "./Http.ts"
import { type OutputChunk, outputOf, Processes } from "./Processes.ts"
import { Refreshable } from "./Refreshable.ts"
import { followLogs, type LogsOptions, logsText, metricSamples, type MetricsOptions } from "./SandboxTelemetry.ts"
import { SseParser } from "./Sse.ts"
import type { Templates } from "./Templates.ts"
import { openTerminal, type Terminal, type TerminalOptions } from "./Terminal.ts"
import type * as T from "./Types.ts"

export type SandboxState = T.SandboxRecord["state"]

export interface ExecOptions {
  readonly cwd?: string | undefined
  readonly env?: Readonly<Record<string, string>> | undefined
  /** Written to its standard input. */
  readonly stdin?: string | undefined
  /** At most this long (default 60000, up to 600000); then it is killed. */
  readonly timeoutMs?: number | undefined
  /** Called with each piece of its standard output as it is written (the command's output streams). */
  readonly onStdout?: ((text: string) => void) | undefined
  /** Called with each piece of its standard error as it is written. */
  readonly onStderr?: ((text: string) => void) | undefined
}

export interface ExecResult {
  readonly exit_code: number
  readonly stdout: string
  readonly stderr: string
  readonly duration_ms: number
  /** The host kept at most 1 MiB of each output and cut it there (never when streamed). */
  readonly truncated: boolean
}

/** The events that move a sandbox's state: what its waits follow. */
const SANDBOX_EVENTS = ["sandbox.state_updated", "sandbox.deleted"]

/** A sandbox: its record as of the last answer, and what can be done with it. */
export class Sandbox extends Refreshable<T.SandboxRecord> {
  readonly #http: Http
  readonly #templates: Templates
  /** Its background processes. */
  readonly processes: Processes
  /** Its code contexts: stateful interpreters (`contexts.create()`, then `context.run(code)`). */
  readonly contexts: Contexts

  constructor(http: Http, templates: Templates, record: T.SandboxRecord) {
    super(record)
    this.#http = http
    this.#templates = templates
    this.processes = new Processes(http, record.id)
    this.contexts = new Contexts(http, record.id)
  }

  get id(): string {
    return this.record.id
  }
  get name(): string {
    return this.record.name
  }

  #path(suffix = ""): string {
    return `/v1/sandboxes/${segment(this.id)}${suffix}`
  }

  protected reread(): Promise<T.SandboxRecord> {
    return this.#http.json("GET", this.#path())
  }

  /**
   * Resolves once the sandbox is in one of `states`; an `error` state (or `deleted`, unless
   * waited for) is thrown as a SvcError `sandbox_error`. It follows the sandbox's events
   * (`GET /v1/events`), reading the record when one arrives, so it resolves as soon as the
   * state is reached; it polls when the key may not read events.
   */
  async waitFor(
    states: SandboxState | ReadonlyArray<SandboxState>,
    options: Omit<WaitOptions<T.SandboxRecord>, "wait"> = {}
  ): Promise<this> {
    const wanted: ReadonlyArray<string> = typeof states === "string" ? [states] : states
    await waitThrough(this.#http, {
      events: SANDBOX_EVENTS,
      concerns: (event) => event.data["sandbox_id"] === this.id,
      read: () => this.refresh(),
      done: (s) => wanted.includes(s.state) || s.state === "error" || s.state === "deleted",
      timeoutMs: options.timeoutMs ?? DEFAULT_WAIT_MS,
      what: `sandbox ${this.id} is not ${wanted.join(" or ")}`,
      onProgress: (s) => options.onProgress?.(s.record)
    })
    if (!wanted.includes(this.state)) {
      throw new SvcError({
        status: 0,
        code: "sandbox_error",
        message: `sandbox ${this.id} is ${this.state}${
          this.record.errorMessage !== null ? `: ${this.record.errorMessage}` : ""
        }`,
        details: { sandbox: this.record }
      })
    }
    return this
  }

  #execBody(cmd: string | ReadonlyArray<string>, options: ExecOptions) {
    return {
      cmd: typeof cmd === "string" ? ["sh", "-c", cmd] : cmd,
      ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
      ...(options.env !== undefined ? { env: options.env } : {}),
      ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
      ...(options.timeoutMs !== undefined ? { timeout_ms: options.timeoutMs } : {})
    }
  }

  /**
   * Runs a command and waits for it. `cmd` is argv (`["ls", "-la"]`) or a shell line
   * (`"ls -la | wc -l"`, run as `sh -c`). A non-zero exit is a result, not an error.
   */
  async exec(cmd: string | ReadonlyArray<string>, options: ExecOptions = {}): Promise<ExecResult> {
    if (options.onStdout === undefined && options.onStderr === undefined) {
      return this.#http.json("POST", this.#path("/exec"), { json: this.#execBody(cmd, options) })
    }
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() }
    const out = { stdout: "", stderr: "" }
    for await (const chunk of this.execStream(cmd, options)) {
      if (chunk.type === "exit") {
        return {
          exit_code: chunk.exit_code,
          duration_ms: chunk.duration_ms,
          stdout: out.stdout + decoders.stdout.decode(),
          stderr: out.stderr + decoders.stderr.decode(),
          truncated: false
        }
      }
      const text = decoders[chunk.type].decode(chunk.data, { stream: true })
      out[chunk.type] += text
      ;(chunk.type === "stdout" ? options.onStdout : options.onStderr)?.(text)
    }
    throw new SvcError({ status: 0, code: "network_error", message: "the command's stream ended before its exit" })
  }

  /**
   * Runs a command and yields its output as it is written (`stdout`/`stderr` bytes), then its
   * `exit`: an async iterator read only as fast as it is consumed. Leaving the loop early
   * closes the stream (the command runs on to its end or its `timeoutMs`).
   */
  async *execStream(
    cmd: string | ReadonlyArray<string>,
    options: Omit<ExecOptions, "onStdout" | "onStderr"> = {}
  ): AsyncGenerator<OutputChunk> {
    const response = await this.#http.request("POST", this.#path("/exec"), {
      json: this.#execBody(cmd, options),
      headers: { accept: "text/event-stream" }
    })
    yield* outputOf(response)
  }

  /**
   * An interactive terminal (a PTY running a shell) in the running sandbox, over the /terminal
   * WebSocket: `write`, `resize`, `onData`, `close`, and `exited` (the shell's exit code).
   */
  terminal(options: TerminalOptions = {}): Promise<Terminal> {
    return openTerminal(this.#http, this.id, options)
  }

  /** The sandbox's files (paths are absolute, inside the sandbox). */
  readonly files = {
    /** Writes a file (replacing it once every byte arrived), streamed: the sandbox's disk bounds it. */
    write: async (path: string, data: string | Uint8Array | ArrayBuffer | Blob): Promise<void> => {
      await this.#http.request("PUT", this.#path("/files"), {
        query: { path },
        body: data as RequestBody,
        headers: { "content-type": "application/octet-stream" }
      })
    },
    /** A file's bytes. A folder is a SvcError `not_a_file` (see `list`). */
    read: async (path: string): Promise<Uint8Array> => {
      const response = await this.#http.request("GET", this.#path("/files"), { query: { path } })
      if ((response.headers.get("content-type") ?? "").startsWith("application/json")) {
        await response.body?.cancel()
        throw new SvcError({ status: 0, code: "not_a_file", message: `${path} is a folder: use files.list` })
      }
      return new Uint8Array(await response.arrayBuffer())
    },
    /** A file's text (UTF-8). */
    readText: async (path: string): Promise<string> => new TextDecoder().decode(await this.files.read(path)),
    /** A folder's entries. A file is a SvcError `not_a_folder`. */
    list: async (path: string): Promise<ReadonlyArray<T.FileEntry>> => {
      const response = await this.#http.request("GET", this.#path("/files"), { query: { path } })
      if (!(response.headers.get("content-type") ?? "").startsWith("application/json")) {
        await response.body?.cancel()
        throw new SvcError({ status: 0, code: "not_a_folder", message: `${path} is a file: use files.read` })
      }
      return ((await response.json()) as T.FileListing).entries
    },
    /** The entry at `path` (a final symlink not followed; `target` is its target). */
    stat: (path: string): Promise<T.FileInfo> => this.#http.json("GET", this.#path("/files/stat"), { query: { path } }),
    /** Makes a folder (with its parents unless `parents: false`); resolves to its stat. */
    mkdir: (path: string, options: { readonly parents?: boolean; readonly mode?: string } = {}): Promise<T.FileInfo> =>
      this.#http.json("POST", this.#path("/files/mkdir"), { json: { path, ...options } }),
    /** Renames `from` to `to`; an existing `to` is a SvcError `conflict` unless `overwrite: true`. */
    move: (from: string, to: string, options: { readonly overwrite?: boolean } = {}): Promise<T.FileInfo> =>
      this.#http.json("POST", this.#path("/files/move"), { json: { from, to, ...options } }),
    /** Removes the entry; a folder with entries needs `recursive: true` (else a SvcError `conflict`). */
    remove: async (path: string, options: { readonly recursive?: boolean } = {}): Promise<void> => {
      const response = await this.#http.request("DELETE", this.#path("/files"), {
        query: { path, recursive: options.recursive === true ? "true" : "false" }
      })
      await response.body?.cancel()
    },
    /**
     * Uploads a local folder (a path: Node only) or a tar stream (`.tar`, or `.tar.gz` with
     * `{ gzip: true }`) to `remotePath`, extracted there (made with its parents; merged into an
     * existing folder). Streamed: nothing is held whole. Hostile entries are a SvcError `invalid_request`.
     */
    upload: async (
      source: string | ReadableStream<Uint8Array> | Uint8Array,
      remotePath: string,
      options: { readonly gzip?: boolean } = {}
    ): Promise<void> => {
      const body = typeof source === "string" ? await tarFolder(source) : source
      const response = await this.#http.request("PUT", this.#path("/files/archive"), {
        query: { path: remotePath },
        body: body as RequestBody,
        headers: { "content-type": options.gzip === true ? "application/gzip" : "application/x-tar" }
      })
      await response.body?.cancel()
    },
    /**
     * Downloads the folder at `remotePath`: extracted into the local folder `localPath` (Node
     * only; resolves to the number of entries), or without it the tar stream itself
     * (`{ gzip: true }`: a tar.gz).
     */
    download: (async (remotePath: string, localPath?: string, options: { readonly gzip?: boolean } = {}) => {
      const response = await this.#http.request("GET", this.#path("/files/archive"), {
        query: { path: remotePath, format: options.gzip === true && localPath === undefined ? "tar.gz" : "tar" }
      })
      if (localPath === undefined) return response.body ?? new ReadableStream<Uint8Array>()
      return untarInto(chunks(response), localPath)
    }) as {
      (remotePath: string, localPath: string): Promise<number>
      (remotePath: string, localPath?: undefined, options?: { readonly gzip?: boolean }): Promise<
        ReadableStream<Uint8Array>
      >
    },
    /**
     * The changes under `path` (in every folder below it unless `recursive: false`) as they
     * happen; ends with the watch (`overflow` last when this reader fell behind, or the sandbox
     * stopped). Leaving the loop, or `signal`, closes it.
     */
    watch: (
      path: string,
      options: { readonly recursive?: boolean; readonly signal?: AbortSignal } = {}
    ): AsyncIterable<T.FileWatchEvent> => {
      const http = this.#http
      const url = this.#path("/files/watch")
      return {
        async *[Symbol.asyncIterator]() {
          const response = await http.request("GET", url, {
            query: { path, recursive: options.recursive === false ? "false" : "true" },
            headers: { accept: "text/event-stream" },
            signal: options.signal
          })
          const parser = new SseParser()
          const decoder = new TextDecoder()
          for await (const chunk of chunks(response)) {
            for (const message of parser.push(decoder.decode(chunk, { stream: true }))) {
              yield JSON.parse(message.data) as T.FileWatchEvent
            }
          }
        }
      }
    }
  }

  /** Deletes it and its children; `{ wait: true }` resolves once it is `deleted`. */
  async delete(options: WaitOptions<T.SandboxRecord> = {}): Promise<this> {
    this.update(await this.#http.json("DELETE", this.#path()))
    if (options.wait === true && this.state !== "deleted") await this.waitFor("deleted", options)
    return this
  }

  /** Stops it (a running sandbox); resolves once `stopped` unless `{ wait: false }`. */
  async stop(options: WaitOptions<T.SandboxRecord> = {}): Promise<this> {
    this.update(await this.#http.json("POST", this.#path("/stop")))
    return options.wait === false ? this : this.waitFor("stopped", options)
  }

  /** Starts it again (a stopped sandbox); resolves once `running` unless `{ wait: false }`. */
  async start(options: WaitOptions<T.SandboxRecord> = {}): Promise<this> {
    this.update(await this.#http.json("POST", this.#path("/start")))
    return options.wait === false ? this : this.waitFor("running", options)
  }

  /** Its usage now: CPU, memory, processes, network bytes (a running sandbox). */
  stats(): Promise<T.SandboxStats> {
    return this.#http.json("GET", this.#path("/stats"))
  }

  /** Its log so far (`<ts> <source>: <text>` lines): lifecycle, how runs ended, its template's `start_cmd` output. */
  logs(options?: LogsOptions & { readonly follow?: false | undefined }): Promise<string>
  /** Its log's lines as they are written (those stored first), until `signal` aborts. */
  logs(options: LogsOptions & { readonly follow: true }): AsyncGenerator<string>
  logs(
    options: LogsOptions & { readonly follow?: boolean | undefined } = {}
  ): Promise<string> | AsyncGenerator<string> {
    return options.follow === true
      ? followLogs(this.#http, this.#path("/logs"), options)
      : logsText(this.#http, this.#path("/logs"), options)
  }

  /** Its samples (every 5 s while it runs, kept 24 h), oldest first. */
  metrics(options: MetricsOptions = {}): Promise<ReadonlyArray<T.MetricSample>> {
    return metricSamples(this.#http, this.#path("/metrics"), options)
  }

  /** Replaces its egress policy. */
  async setNetwork(policy: { allow_out?: ReadonlyArray<string>; deny_out?: ReadonlyArray<string> }): Promise<this> {
    return this.update(await this.#http.json("PUT", this.#path("/network"), { json: policy }))
  }

  /** Binds a secret of the org (the key needs `secrets:use`). */
  async bindSecret(secretId: string): Promise<void> {
    await this.#http.request("POST", this.#path("/secrets"), { json: { secret_id: secretId } })
  }

  /** A preview URL and token for one of its exposed ports. */
  exposePort(port: number, options: { ttl_s?: number } = {}): Promise<T.PreviewToken> {
    return this.#http.json("POST", this.#path(`/ports/${port}/token`), { json: options })
  }

  /**
   * Forks it: `count` (1 to 20, default 1) new sandboxes whose files start as its own now, with
   * its template, resources, env, network policy, secrets and ports; it keeps running. Resolves
   * once every fork runs unless `{ wait: false }` (then `pending` at once).
   */
  async fork(
    params: T.ForkParams = {},
    options: WaitOptions<T.SandboxRecord> & { readonly idempotencyKey?: string | undefined } = {}
  ): Promise<Array<Sandbox>> {
    const answer: { sandboxes: Array<T.SandboxRecord> } = await this.#http.json("POST", this.#path("/fork"), {
      json: params,
      headers: idempotency(options)
    })
    const forks = answer.sandboxes.map((record) => new Sandbox(this.#http, this.#templates, record))
    return options.wait === false ? forks : Promise.all(forks.map((f) => f.waitFor("running", options)))
  }

  /** Captures its files as a template named `name`; resolves once built unless `{ wait: false }`. */
  async snapshot(name: string, options: WaitOptions<T.Template> = {}): Promise<T.Template> {
    const template: T.Template = await this.#http.json("POST", this.#path("/snapshot"), { json: { name } })
    return options.wait === false ? template : this.#templates.waitFor(template.id, options)
  }

  /**
   * A keep-alive: `timeout_s` counts again from now, `idle_timeout_s` replaces the idle limit;
   * `null` removes either, a field left out is kept (PUT .../timeout). The record shows the new
   * `expiresAt`.
   */
  async setTimeout(settings: { timeout_s?: number | null; idle_timeout_s?: number | null }): Promise<this> {
    return this.update(await this.#http.json("PUT", this.#path("/timeout"), { json: settings }))
  }
}

export interface ListSandboxesOptions extends ListOptions {
  /** One state or several. */
  readonly state?: SandboxState | ReadonlyArray<SandboxState> | undefined
  /** false: every row (up to 10,000) in one answer. */
  readonly paginated?: boolean | undefined
}

/** `svc.sandboxes`. */
export class Sandboxes {
  readonly #http: Http
  readonly templates: Templates

  constructor(http: Http, templates: Templates) {
    this.#http = http
    this.templates = templates
  }

  #wrap = (record: T.SandboxRecord) => new Sandbox(this.#http, this.templates, record)

  /**
   * Creates a sandbox and resolves once it is running (a SvcError `sandbox_error` if it ends in
   * `error`); `{ wait: false }` resolves with the `pending` record at once. `idempotencyKey`:
   * the same key and body again answer the same sandbox.
   */
  async create(
    params: T.CreateSandboxParams = {},
    options: WaitOptions<T.SandboxRecord> & { readonly idempotencyKey?: string | undefined } = {}
  ): Promise<Sandbox> {
    const sandbox = this.#wrap(
      await this.#http.json("POST", "/v1/sandboxes", { json: params, headers: idempotency(options) })
    )
    return options.wait === false ? sandbox : sandbox.waitFor("running", options)
  }

  async get(sandboxId: string): Promise<Sandbox> {
    return this.#wrap(await this.#http.json("GET", `/v1/sandboxes/${segment(sandboxId)}`))
  }

  /** Newest first. */
  async list(options: ListSandboxesOptions = {}): Promise<Page<"rows", Sandbox>> {
    const page = await this.#http.json<Page<"rows", T.SandboxRecord>>("GET", "/v1/sandboxes", {
      query: {
        limit: options.limit,
        offset: options.offset,
        state: typeof options.state === "string" ? options.state : options.state?.join(","),
        paginated: options.paginated
      }
    })
    return { ...page, rows: page.rows.map(this.#wrap) }
  }
}
