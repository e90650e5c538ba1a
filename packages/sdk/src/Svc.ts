/**
 * The Promise client, for JavaScript and TypeScript without Effect:
 *
 *   import { Svc } from "@svc/sdk"
 *   const svc = new Svc()                       // SVC_API_URL, SVC_API_KEY
 *   const sandbox = await svc.sandboxes.create({ name: "demo" })   // resolves once running
 *   const { stdout } = await sandbox.exec("echo hello")
 *   await sandbox.delete()
 *
 * Records are the API's JSON exactly (timestamps are ISO strings): their types are the encoded
 * side of the server's own schemas (`@svc/domain`). Every non-2xx answer is thrown as a
 * `SvcError` with the answer's `status`, `code` and details.
 */
import { sseMessages } from "./Sse.ts"
import type * as T from "./Types.ts"

export type * from "./Types.ts"

/** Where the API is when neither the options nor `SVC_API_URL` say. */
export const DEFAULT_BASE_URL = "http://127.0.0.1:8080"

// ---------------------------------------------------------------------------------------------
// Errors

/**
 * Every failure of a call. `status` is the HTTP status of the API's answer, or 0 when there was
 * no answer to give one: `network_error` (the API could not be reached, or the connection was
 * cut), `timeout` (a wait ran out), `sandbox_error` / `template_failed` (what was waited for
 * ended in failure), `unexpected_response`.
 */
export class SvcError extends Error {
  override readonly name = "SvcError"
  /** The HTTP status, 0 when the API did not answer. */
  readonly status: number
  /** The API's `code` (`not_found`, `invalid_request`, `conflict`, ...) or one of the client's. */
  readonly code: string
  /** The body's other fields: `issues` of `invalid_request`, `required_scope`, `errno`... */
  readonly details: Readonly<Record<string, unknown>>

  constructor(options: {
    readonly status: number
    readonly code: string
    readonly message: string
    readonly details?: Readonly<Record<string, unknown>>
    readonly cause?: unknown
  }) {
    super(options.message, options.cause !== undefined ? { cause: options.cause } : undefined)
    this.status = options.status
    this.code = options.code
    this.details = options.details ?? {}
  }

  /** `issues` of an `invalid_request`: each invalid field of the request at once. */
  get issues(): ReadonlyArray<{ readonly path: string; readonly message: string }> {
    const issues = this.details["issues"]
    return Array.isArray(issues) ? issues : []
  }
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** The SvcError of a non-2xx answer: `{error, code, ...details}` when it is the API's JSON. */
const errorOf = async (response: Response): Promise<SvcError> => {
  const text = await response.text().catch(() => "")
  let body: unknown = undefined
  try {
    body = JSON.parse(text)
  } catch {
    // Not the API's JSON (a proxy's page): its start is the message.
  }
  if (isRecord(body) && typeof body["code"] === "string") {
    const { error, code, ...details } = body
    return new SvcError({
      status: response.status,
      code,
      message: typeof error === "string" ? error : code,
      details
    })
  }
  return new SvcError({
    status: response.status,
    code: `http_${response.status}`,
    message: text.slice(0, 300) || response.statusText || `HTTP ${response.status}`
  })
}

// ---------------------------------------------------------------------------------------------
// Transport

export interface SvcOptions {
  /** The API's address, e.g. `http://127.0.0.1:8080` (no `/v1`). Default: `SVC_API_URL`, else http://127.0.0.1:8080. */
  readonly baseUrl?: string | undefined
  /** A key (`svc_live_...`). Default: `SVC_API_KEY`. */
  readonly apiKey?: string | undefined
  /** Another `fetch` (a proxy's, a test's). */
  readonly fetch?: typeof globalThis.fetch | undefined
}

type RequestBody = NonNullable<RequestInit["body"]>

/** A body's chunks (through a reader: not every ReadableStream type is async-iterable). */
async function* chunks(response: Response): AsyncGenerator<Uint8Array> {
  if (response.body === null) return
  const reader = response.body.getReader()
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return
      yield value as Uint8Array
    }
  } finally {
    reader.releaseLock()
    await response.body.cancel().catch(() => undefined)
  }
}

interface RequestOptions {
  readonly query?: Record<string, string | number | boolean | undefined> | undefined
  /** A JSON body. */
  readonly json?: unknown
  /** A raw body. */
  readonly body?: RequestBody | undefined
  readonly headers?: Record<string, string | undefined> | undefined
  readonly signal?: AbortSignal | undefined
}

const env = (name: string): string | undefined => {
  const value = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.[name]
  return value === "" ? undefined : value
}

/** One configured connection to the API; the resources share it. */
class Http {
  readonly baseUrl: string
  readonly #apiKey: string
  readonly #fetch: typeof globalThis.fetch

  constructor(options: SvcOptions) {
    this.baseUrl = (options.baseUrl ?? env("SVC_API_URL") ?? DEFAULT_BASE_URL).replace(/\/+$/, "")
    const apiKey = options.apiKey ?? env("SVC_API_KEY")
    if (apiKey === undefined || apiKey === "") {
      throw new SvcError({
        status: 0,
        code: "missing_api_key",
        message: "No API key: pass { apiKey } or set SVC_API_KEY"
      })
    }
    this.#apiKey = apiKey
    this.#fetch = options.fetch ?? globalThis.fetch
  }

  url(path: string, query?: RequestOptions["query"]): string {
    const search = new URLSearchParams()
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) search.set(k, String(v))
    const q = search.toString()
    return `${this.baseUrl}${path}${q === "" ? "" : `?${q}`}`
  }

  /** The answer when it is 2xx; a thrown SvcError otherwise. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.#apiKey}` }
    for (const [k, v] of Object.entries(options.headers ?? {})) if (v !== undefined) headers[k] = v
    let body: RequestBody | undefined = options.body
    if (options.json !== undefined) {
      headers["content-type"] = "application/json"
      body = JSON.stringify(options.json)
    }
    let response: Response
    try {
      response = await this.#fetch(this.url(path, options.query), {
        method,
        headers,
        ...(body !== undefined ? { body } : {}),
        ...(options.signal !== undefined ? { signal: options.signal } : {})
      })
    } catch (cause) {
      if (options.signal?.aborted) throw cause
      throw new SvcError({
        status: 0,
        code: "network_error",
        message: `cannot reach ${this.baseUrl}: ${cause instanceof Error ? cause.message : String(cause)}`,
        cause
      })
    }
    if (!response.ok) throw await errorOf(response)
    return response
  }

  async json<A>(method: string, path: string, options?: RequestOptions): Promise<A> {
    const response = await this.request(method, path, options)
    if (response.status === 204) return undefined as A
    const text = await response.text()
    try {
      return JSON.parse(text) as A
    } catch (cause) {
      throw new SvcError({
        status: response.status,
        code: "unexpected_response",
        message: `the API's answer is not JSON: ${text.slice(0, 200)}`,
        cause
      })
    }
  }
}

const id = (value: string) => encodeURIComponent(value)

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal?.removeEventListener("abort", done)
      resolve()
    }
    signal?.addEventListener("abort", done, { once: true })
  })

/** Polls `read` until `done` says so; the delay grows from 100 ms to 1 s. */
const poll = async <A>(
  read: () => Promise<A>,
  done: (a: A) => boolean,
  options: { readonly timeoutMs: number; readonly what: string; readonly onProgress?: ((a: A) => void) | undefined }
): Promise<A> => {
  const deadline = Date.now() + options.timeoutMs
  let delay = 100
  for (;;) {
    const value = await read()
    options.onProgress?.(value)
    if (done(value)) return value
    if (Date.now() + delay > deadline) {
      throw new SvcError({
        status: 0,
        code: "timeout",
        message: `${options.what} after ${Math.round(options.timeoutMs / 1000)} s`
      })
    }
    await sleep(delay)
    delay = Math.min(delay * 2, 1000)
  }
}

export interface ListOptions {
  readonly limit?: number | undefined
  readonly offset?: number | undefined
}

export interface WaitOptions<R> {
  /** Default true: resolve once it got there. `false`: resolve with the API's first answer. */
  readonly wait?: boolean | undefined
  /** How long to wait (default 300000 ms); then a SvcError `timeout`. */
  readonly timeoutMs?: number | undefined
  /** Called with the record each time it is read while waiting (to show progress). */
  readonly onProgress?: ((record: R) => void) | undefined
}

const DEFAULT_WAIT_MS = 300_000

// ---------------------------------------------------------------------------------------------
// Sandboxes

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

const fromBase64 = (text: string): Uint8Array => Uint8Array.from(atob(text), (c) => c.charCodeAt(0))

/** A sandbox: its record as of the last answer, and what can be done with it. */
export class Sandbox {
  readonly #http: Http
  readonly #sandboxes: Sandboxes
  #record: T.SandboxRecord

  constructor(http: Http, sandboxes: Sandboxes, record: T.SandboxRecord) {
    this.#http = http
    this.#sandboxes = sandboxes
    this.#record = record
  }

  get id(): string {
    return this.#record.id
  }
  get name(): string {
    return this.#record.name
  }
  /** As of the last answer: `refresh()` asks again. */
  get state(): SandboxState {
    return this.#record.state
  }
  /** The whole record (`templateId`, `internalIp`, `errorMessage`, `createdAt`...). */
  get record(): T.SandboxRecord {
    return this.#record
  }
  toJSON(): T.SandboxRecord {
    return this.#record
  }

  #path(suffix = ""): string {
    return `/v1/sandboxes/${id(this.id)}${suffix}`
  }

  #update(record: T.SandboxRecord): this {
    this.#record = record
    return this
  }

  /** Reads the record again. */
  async refresh(): Promise<this> {
    return this.#update(await this.#http.json("GET", this.#path()))
  }

  /**
   * Resolves once the sandbox is in one of `states`; an `error` state (or `deleted`, unless
   * waited for) is thrown as a SvcError `sandbox_error`.
   */
  async waitFor(
    states: SandboxState | ReadonlyArray<SandboxState>,
    options: Omit<WaitOptions<T.SandboxRecord>, "wait"> = {}
  ): Promise<this> {
    const wanted: ReadonlyArray<string> = typeof states === "string" ? [states] : states
    await poll(() => this.refresh(), (s) => wanted.includes(s.state) || s.state === "error" || s.state === "deleted", {
      timeoutMs: options.timeoutMs ?? DEFAULT_WAIT_MS,
      what: `sandbox ${this.id} is not ${wanted.join(" or ")}`,
      onProgress: (s) => options.onProgress?.(s.record)
    })
    if (!wanted.includes(this.state)) {
      throw new SvcError({
        status: 0,
        code: "sandbox_error",
        message: `sandbox ${this.id} is ${this.state}${
          this.#record.errorMessage !== null ? `: ${this.#record.errorMessage}` : ""
        }`,
        details: { sandbox: this.#record }
      })
    }
    return this
  }

  /**
   * Runs a command and waits for it. `cmd` is argv (`["ls", "-la"]`) or a shell line
   * (`"ls -la | wc -l"`, run as `sh -c`). A non-zero exit is a result, not an error.
   */
  async exec(cmd: string | ReadonlyArray<string>, options: ExecOptions = {}): Promise<ExecResult> {
    const json = {
      cmd: typeof cmd === "string" ? ["sh", "-c", cmd] : cmd,
      ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
      ...(options.env !== undefined ? { env: options.env } : {}),
      ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
      ...(options.timeoutMs !== undefined ? { timeout_ms: options.timeoutMs } : {})
    }
    if (options.onStdout === undefined && options.onStderr === undefined) {
      return this.#http.json("POST", this.#path("/exec"), { json })
    }
    const response = await this.#http.request("POST", this.#path("/exec"), {
      json,
      headers: { accept: "text/event-stream" }
    })
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() }
    const out = { stdout: "", stderr: "" }
    for await (const message of sseMessages(chunks(response))) {
      const data = JSON.parse(message.data) as Record<string, unknown>
      if (message.event === "stdout" || message.event === "stderr") {
        const text = decoders[message.event].decode(fromBase64(String(data["data"])), { stream: true })
        out[message.event] += text
        ;(message.event === "stdout" ? options.onStdout : options.onStderr)?.(text)
      } else if (message.event === "exit") {
        return {
          exit_code: Number(data["exit_code"]),
          duration_ms: Number(data["duration_ms"]),
          stdout: out.stdout + decoders.stdout.decode(),
          stderr: out.stderr + decoders.stderr.decode(),
          truncated: false
        }
      } else if (message.event === "error") {
        throw new SvcError({
          status: 0,
          code: String(data["code"] ?? "unavailable"),
          message: String(data["error"] ?? "the command's stream ended with an error")
        })
      }
    }
    throw new SvcError({ status: 0, code: "network_error", message: "the command's stream ended before its exit" })
  }

  /** The sandbox's files (paths are absolute, inside the sandbox). */
  readonly files = {
    /** Writes a file (replacing it once every byte arrived); up to 100 MiB. */
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
    }
  }

  /** Deletes it and its children; `{ wait: true }` resolves once it is `deleted`. */
  async delete(options: WaitOptions<T.SandboxRecord> = {}): Promise<this> {
    this.#update(await this.#http.json("DELETE", this.#path()))
    if (options.wait === true && this.state !== "deleted") await this.waitFor("deleted", options)
    return this
  }

  /** Stops it (a running sandbox); resolves once `stopped` unless `{ wait: false }`. */
  async stop(options: WaitOptions<T.SandboxRecord> = {}): Promise<this> {
    this.#update(await this.#http.json("POST", this.#path("/stop")))
    return options.wait === false ? this : this.waitFor("stopped", options)
  }

  /** Starts it again (a stopped sandbox); resolves once `running` unless `{ wait: false }`. */
  async start(options: WaitOptions<T.SandboxRecord> = {}): Promise<this> {
    this.#update(await this.#http.json("POST", this.#path("/start")))
    return options.wait === false ? this : this.waitFor("running", options)
  }

  /** Its usage now: CPU, memory, processes, network bytes (a running sandbox). */
  stats(): Promise<T.SandboxStats> {
    return this.#http.json("GET", this.#path("/stats"))
  }

  /** Replaces its egress policy. */
  async setNetwork(policy: { allow_out?: ReadonlyArray<string>; deny_out?: ReadonlyArray<string> }): Promise<this> {
    return this.#update(await this.#http.json("PUT", this.#path("/network"), { json: policy }))
  }

  /** Binds a secret of the org (the key needs `secrets:use`). */
  async bindSecret(secretId: string): Promise<void> {
    await this.#http.request("POST", this.#path("/secrets"), { json: { secret_id: secretId } })
  }

  /** A preview URL and token for one of its exposed ports. */
  exposePort(port: number, options: { ttl_s?: number } = {}): Promise<T.PreviewToken> {
    return this.#http.json("POST", this.#path(`/ports/${port}/token`), { json: options })
  }

  /** Captures its files as a template named `name`; resolves once built unless `{ wait: false }`. */
  async snapshot(name: string, options: WaitOptions<T.Template> = {}): Promise<T.Template> {
    const template: T.Template = await this.#http.json("POST", this.#path("/snapshot"), { json: { name } })
    return options.wait === false ? template : this.#sandboxes.templates.waitFor(template.id, options)
  }
}

export interface ListSandboxesOptions extends ListOptions {
  /** One state or several. */
  readonly state?: SandboxState | ReadonlyArray<SandboxState> | undefined
  /** false: every row (up to 10,000) in one answer. */
  readonly paginated?: boolean | undefined
}

export type Page<K extends string, A> = { readonly [P in K]: ReadonlyArray<A> } & {
  readonly total: number
  readonly offset: number
  readonly limit: number
  readonly has_more: boolean
}

class Sandboxes {
  readonly #http: Http
  readonly templates: Templates

  constructor(http: Http, templates: Templates) {
    this.#http = http
    this.templates = templates
  }

  #wrap = (record: T.SandboxRecord) => new Sandbox(this.#http, this, record)

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
      await this.#http.json("POST", "/v1/sandboxes", {
        json: params,
        headers: { "idempotency-key": options.idempotencyKey }
      })
    )
    return options.wait === false ? sandbox : sandbox.waitFor("running", options)
  }

  async get(sandboxId: string): Promise<Sandbox> {
    return this.#wrap(await this.#http.json("GET", `/v1/sandboxes/${id(sandboxId)}`))
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

// ---------------------------------------------------------------------------------------------
// The other resources

class Templates {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }

  /**
   * Builds a template from steps; resolves once `ready` (a SvcError `template_failed` if the
   * build fails) unless `{ wait: false }` (then `building` at once).
   */
  async create(params: T.CreateTemplateParams, options: WaitOptions<T.Template> = {}): Promise<T.Template> {
    const template: T.Template = await this.#http.json("POST", "/v1/templates", { json: params })
    return options.wait === false ? template : this.waitFor(template.id, options)
  }
  list(options: ListOptions = {}): Promise<Page<"rows", T.Template>> {
    return this.#http.json("GET", "/v1/templates", { query: { ...options } })
  }
  /** By id or name. */
  get(idOrName: string): Promise<T.Template> {
    return this.#http.json("GET", `/v1/templates/${id(idOrName)}`)
  }
  /** Refused (409) while a sandbox uses it. */
  delete(idOrName: string): Promise<T.Template> {
    return this.#http.json("DELETE", `/v1/templates/${id(idOrName)}`)
  }
  /** The build log so far. */
  async logs(idOrName: string): Promise<string> {
    return (await this.#http.request("GET", `/v1/templates/${id(idOrName)}/logs`)).text()
  }
  /** The build log as it is written, until the build ends. */
  async *followLogs(idOrName: string): AsyncGenerator<string> {
    const response = await this.#http.request("GET", `/v1/templates/${id(idOrName)}/logs`, {
      query: { follow: "true" }
    })
    const decoder = new TextDecoder()
    for await (const chunk of chunks(response)) yield decoder.decode(chunk, { stream: true })
    const rest = decoder.decode()
    if (rest !== "") yield rest
  }
  /** Resolves once the build ended `ready`; `failed` is a SvcError `template_failed`. */
  async waitFor(
    idOrName: string,
    options: {
      readonly timeoutMs?: number | undefined
      readonly onProgress?: ((template: T.Template) => void) | undefined
    } = {}
  ): Promise<T.Template> {
    const template = await poll(() => this.get(idOrName), (t) => t.state !== "building", {
      timeoutMs: options.timeoutMs ?? DEFAULT_WAIT_MS,
      what: `template ${idOrName} is still building`,
      onProgress: options.onProgress
    })
    if (template.state === "failed") {
      throw new SvcError({
        status: 0,
        code: "template_failed",
        message: `template ${template.name} failed: ${template.errorMessage ?? "no message"}`,
        details: { template }
      })
    }
    return template
  }
}

class Volumes {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  create(
    params: T.CreateVolumeParams,
    options: { readonly idempotencyKey?: string | undefined } = {}
  ): Promise<T.Volume> {
    return this.#http.json("POST", "/v1/volumes", {
      json: params,
      headers: { "idempotency-key": options.idempotencyKey }
    })
  }
  list(options: ListOptions = {}): Promise<Page<"volumes", T.Volume>> {
    return this.#http.json("GET", "/v1/volumes", { query: { ...options } })
  }
  get(volumeId: string): Promise<T.Volume> {
    return this.#http.json("GET", `/v1/volumes/${id(volumeId)}`)
  }
  /** Refused (409) while a sandbox has it. */
  delete(volumeId: string): Promise<T.Volume> {
    return this.#http.json("DELETE", `/v1/volumes/${id(volumeId)}`)
  }
}

/** Long-running deployments: `replicas` sandboxes of a template running a command (docs/contract.md#apps). */
class Apps {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** Answers at once (`deploying`); `waitUntilRunning` waits for the replicas. */
  create(params: T.CreateAppParams, options: { readonly idempotencyKey?: string | undefined } = {}): Promise<T.App> {
    return this.#http.json("POST", "/v1/apps", {
      json: params,
      headers: { "idempotency-key": options.idempotencyKey }
    })
  }
  list(options: ListOptions = {}): Promise<Page<"apps", T.App>> {
    return this.#http.json("GET", "/v1/apps", { query: { ...options } })
  }
  get(appId: string): Promise<T.App> {
    return this.#http.json("GET", `/v1/apps/${id(appId)}`)
  }
  /** Replaces what it names; a new `cmd` or `env` rolls the replicas over one at a time. */
  update(appId: string, patch: T.UpdateAppParams): Promise<T.App> {
    return this.#http.json("PATCH", `/v1/apps/${id(appId)}`, { json: patch })
  }
  scale(appId: string, replicas: number): Promise<T.App> {
    return this.update(appId, { replicas })
  }
  /** The app and its sandboxes go (`deleting`, then not found). */
  delete(appId: string): Promise<T.App> {
    return this.#http.json("DELETE", `/v1/apps/${id(appId)}`)
  }
  /** Polls until every replica is ready (`running`); rejects after `timeoutMs` (default 120 s). */
  async waitUntilRunning(appId: string, options: { readonly timeoutMs?: number } = {}): Promise<T.App> {
    const deadline = Date.now() + (options.timeoutMs ?? 120_000)
    for (;;) {
      const app = await this.get(appId)
      if (app.state === "running") return app
      if (Date.now() > deadline) {
        throw new SvcError({
          status: 0,
          code: "timeout",
          message: `app ${app.name} is ${app.state}: ${app.reason ?? "no reason given"}`,
          details: { app }
        })
      }
      await new Promise((resolve) => setTimeout(resolve, 500))
    }
  }
}

class Secrets {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** The value is sent once and never returned by the API. */
  create(
    params: T.CreateSecretParams,
    options: { readonly idempotencyKey?: string | undefined } = {}
  ): Promise<T.Secret> {
    return this.#http.json("POST", "/v1/secrets", {
      json: params,
      headers: { "idempotency-key": options.idempotencyKey }
    })
  }
  list(options: ListOptions = {}): Promise<Page<"secrets", T.Secret>> {
    return this.#http.json("GET", "/v1/secrets", { query: { ...options } })
  }
  get(secretId: string): Promise<T.Secret> {
    return this.#http.json("GET", `/v1/secrets/${id(secretId)}`)
  }
  /** Replaces the value. */
  rotate(secretId: string, value: string): Promise<T.Secret> {
    return this.#http.json("PUT", `/v1/secrets/${id(secretId)}/value`, { json: { value } })
  }
  update(secretId: string, patch: T.UpdateSecretParams): Promise<T.Secret> {
    return this.#http.json("PATCH", `/v1/secrets/${id(secretId)}`, { json: patch })
  }
  delete(secretId: string): Promise<T.Secret> {
    return this.#http.json("DELETE", `/v1/secrets/${id(secretId)}`)
  }
}

class Webhooks {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** The answer's `secret_returned_once` is the signing secret, shown this once (`verifyWebhook`). */
  create(
    params: T.CreateWebhookParams,
    options: { readonly idempotencyKey?: string | undefined } = {}
  ): Promise<T.CreatedWebhook> {
    return this.#http.json("POST", "/v1/webhooks", {
      json: params,
      headers: { "idempotency-key": options.idempotencyKey }
    })
  }
  list(options: ListOptions = {}): Promise<Page<"webhooks", T.Webhook>> {
    return this.#http.json("GET", "/v1/webhooks", { query: { ...options } })
  }
  get(webhookId: string): Promise<T.Webhook> {
    return this.#http.json("GET", `/v1/webhooks/${id(webhookId)}`)
  }
  update(webhookId: string, patch: T.UpdateWebhookParams): Promise<T.Webhook> {
    return this.#http.json("PATCH", `/v1/webhooks/${id(webhookId)}`, { json: patch })
  }
  async delete(webhookId: string): Promise<void> {
    await this.#http.request("DELETE", `/v1/webhooks/${id(webhookId)}`)
  }
  /** Sends a `ping` through the real delivery path. */
  test(webhookId: string): Promise<{ readonly delivery_id: string }> {
    return this.#http.json("POST", `/v1/webhooks/${id(webhookId)}/test`)
  }
  /** Delivery attempts, newest first. */
  deliveries(
    webhookId: string,
    options: ListOptions & { readonly status?: T.DeliveryAttempt["status"] | undefined } = {}
  ): Promise<Page<"deliveries", T.DeliveryAttempt>> {
    return this.#http.json("GET", `/v1/webhooks/${id(webhookId)}/deliveries`, { query: { ...options } })
  }
  /** Retries a `failed` or `dead_letter` delivery. */
  retry(webhookId: string, deliveryId: string): Promise<{ readonly delivery_id: string; readonly status: string }> {
    return this.#http.json("POST", `/v1/webhooks/${id(webhookId)}/deliveries/${id(deliveryId)}/retry`)
  }
}

class Keys {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** The answer's `token` is the key, shown this once. */
  create(params: T.CreateKeyParams): Promise<T.CreatedApiKey> {
    return this.#http.json("POST", "/v1/auth/api-keys", { json: params })
  }
  list(options: ListOptions = {}): Promise<Page<"keys", T.ApiKey>> {
    return this.#http.json("GET", "/v1/auth/api-keys", { query: { ...options } })
  }
  revoke(keyId: string): Promise<T.ApiKey> {
    return this.#http.json("DELETE", `/v1/auth/api-keys/${id(keyId)}`)
  }
}

// ---------------------------------------------------------------------------------------------
// Realtime events

/** One event of the org (`GET /v1/events`): the webhook envelope and the stream's `id`. */
export interface SvcEvent {
  /** Its sequence in the platform's event stream: resume after it with `lastEventId`. */
  readonly id: string
  readonly event: string
  readonly org_id: string
  readonly ts: string
  readonly data: Record<string, unknown>
}

export interface EventsOptions {
  /** Only these event names (exact). */
  readonly events?: ReadonlyArray<string> | undefined
  /** Start after this event (an `id` seen before); otherwise from now. */
  readonly lastEventId?: string | undefined
  /** Reconnect when the connection drops, resuming after the last event seen (default true). */
  readonly reconnect?: boolean | undefined
}

/**
 * The org's events as they happen, as an async iterator; it connects at once (`connected`
 * resolves when the server follows the stream: nothing after that is missed) and, when the
 * connection drops, reconnects with `Last-Event-ID` so no event is missed or repeated. Leaving a
 * `for await` loop (or `close()`) ends it.
 */
export class EventStream implements AsyncIterableIterator<SvcEvent> {
  readonly #http: Http
  readonly #options: EventsOptions
  readonly #abort = new AbortController()
  readonly #iterator: AsyncGenerator<SvcEvent>
  #lastEventId: string | undefined
  /** Resolves once the first connection is answered; rejects with its SvcError. */
  readonly connected: Promise<void>

  constructor(http: Http, options: EventsOptions) {
    this.#http = http
    this.#options = options
    this.#lastEventId = options.lastEventId
    const first = this.#open()
    this.connected = first.then(() => undefined)
    // Its failure reaches the caller through next(); this only keeps it from being "unhandled".
    this.connected.catch(() => undefined)
    this.#iterator = this.#run(first)
  }

  /** The `id` of the last event received (what a reconnection resumes after). */
  get lastEventId(): string | undefined {
    return this.#lastEventId
  }

  #open(): Promise<Response> {
    return this.#http.request("GET", "/v1/events", {
      query: { events: this.#options.events?.join(",") },
      headers: { accept: "text/event-stream", "last-event-id": this.#lastEventId },
      signal: this.#abort.signal
    })
  }

  async *#run(first: Promise<Response>): AsyncGenerator<SvcEvent> {
    let pending: Promise<Response> | undefined = first
    let delay = 250
    while (!this.#abort.signal.aborted) {
      try {
        const response: Response = await (pending ?? this.#open())
        pending = undefined
        delay = 250
        for await (const message of sseMessages(chunks(response))) {
          if (message.id !== "") this.#lastEventId = message.id
          const envelope = JSON.parse(message.data) as Omit<SvcEvent, "id">
          yield { id: message.id, ...envelope }
        }
      } catch (error) {
        pending = undefined
        if (this.#abort.signal.aborted) return
        // A refusal (a bad filter, a revoked key) will not heal by retrying; a cut connection or
        // an outage (429, 5xx) may.
        if (error instanceof SvcError && error.status >= 400 && error.status < 500 && error.status !== 429) {
          throw error
        }
        if (!(error instanceof SvcError) && !(error instanceof TypeError)) throw error
      }
      if (this.#options.reconnect === false || this.#abort.signal.aborted) return
      await sleep(delay, this.#abort.signal)
      delay = Math.min(delay * 2, 5000)
    }
  }

  next(): Promise<IteratorResult<SvcEvent>> {
    return this.#iterator.next()
  }

  return(): Promise<IteratorResult<SvcEvent>> {
    this.close()
    return this.#iterator.return(undefined)
  }

  [Symbol.asyncIterator](): this {
    return this
  }

  /** Ends the stream: the connection is closed, the iterator finishes. */
  close(): void {
    this.#abort.abort()
  }
}

// ---------------------------------------------------------------------------------------------
// The client

/**
 * The client: `new Svc({ baseUrl, apiKey })`, each defaulting to `SVC_API_URL` (else
 * http://127.0.0.1:8080) and `SVC_API_KEY`.
 */
export class Svc {
  readonly #http: Http
  readonly sandboxes: Sandboxes
  readonly templates: Templates
  readonly volumes: Volumes
  readonly apps: Apps
  readonly secrets: Secrets
  readonly webhooks: Webhooks
  readonly keys: Keys

  constructor(options: SvcOptions = {}) {
    this.#http = new Http(options)
    this.templates = new Templates(this.#http)
    this.sandboxes = new Sandboxes(this.#http, this.templates)
    this.volumes = new Volumes(this.#http)
    this.apps = new Apps(this.#http)
    this.secrets = new Secrets(this.#http)
    this.webhooks = new Webhooks(this.#http)
    this.keys = new Keys(this.#http)
  }

  get baseUrl(): string {
    return this.#http.baseUrl
  }

  /** The org's events as they happen (see `EventStream`). */
  events(options: EventsOptions = {}): EventStream {
    return new EventStream(this.#http, options)
  }

  /** Who the key is: its org, scopes, user. */
  whoami(): Promise<T.WhoAmI> {
    return this.#http.json("GET", "/v1/auth/me")
  }

  readonly org = {
    get: (): Promise<T.Org> => this.#http.json("GET", "/v1/org"),
    update: (patch: { readonly name: string }): Promise<T.Org> => this.#http.json("PATCH", "/v1/org", { json: patch })
  }

  readonly audit = {
    /** The org's audit log, newest first. */
    list: (options: ListOptions & Readonly<Record<string, string | number | undefined>> = {}): Promise<
      Page<"entries", T.AuditEntry>
    > => this.#http.json("GET", "/v1/audit", { query: { ...options } })
  }
}
