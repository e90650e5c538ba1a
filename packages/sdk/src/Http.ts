/**
 * The Promise client's transport, shared by every resource: one configured connection to the
 * API (`Http`), the error every call throws (`SvcError`), and the small helpers the resources
 * wait and page with. Nothing here knows a route.
 */

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

/** The SvcError of an error body's text: `{error, code, ...details}` when it is the API's JSON. */
export const errorOfBody = (status: number, text: string, statusText = ""): SvcError => {
  let body: unknown = undefined
  try {
    body = JSON.parse(text)
  } catch {
    // Not the API's JSON (a proxy's page): its start is the message.
  }
  if (isRecord(body) && typeof body["code"] === "string") {
    const { error, code, ...details } = body
    return new SvcError({ status, code, message: typeof error === "string" ? error : code, details })
  }
  return new SvcError({
    status,
    code: `http_${status}`,
    message: text.slice(0, 300) || statusText || `HTTP ${status}`
  })
}

/** The SvcError of a non-2xx answer. */
const errorOf = async (response: Response): Promise<SvcError> =>
  errorOfBody(response.status, await response.text().catch(() => ""), response.statusText)

// ---------------------------------------------------------------------------------------------
// Transport

/**
 * What the terminal needs of a standard WebSocket (the global one of Node 22+ and of browsers),
 * written out so the declarations need neither the DOM's types nor Node's.
 */
export interface WebSocketLike {
  binaryType: string
  readonly readyState: number
  send(data: string | ArrayBuffer | Uint8Array): void
  close(code?: number, reason?: string): void
  addEventListener(type: "open" | "message" | "close" | "error", listener: (event: any) => void): void
}

/** A standard WebSocket class (default: the global `WebSocket`). */
export type WebSocketConstructor = new(url: string) => WebSocketLike

export interface SvcOptions {
  /** The API's address, e.g. `http://127.0.0.1:8080` (no `/v1`). Default: `SVC_API_URL`, else http://127.0.0.1:8080. */
  readonly baseUrl?: string | undefined
  /** A key (`svc_live_...`). Default: `SVC_API_KEY`. */
  readonly apiKey?: string | undefined
  /** Another `fetch` (a proxy's, a test's). */
  readonly fetch?: typeof globalThis.fetch | undefined
  /** Another WebSocket class, for the terminal (default: the global `WebSocket` of Node 22+). */
  readonly WebSocket?: WebSocketConstructor | undefined
  /**
   * How many times a refusal that says when to come back (429 `rate_limited`, 503 `no_capacity`:
   * an answer with `Retry-After`) is sent again after that wait (default 2); a body that is a
   * stream is never sent twice.
   */
  readonly maxRetries?: number | undefined
  /** The longest `Retry-After` waited for, in ms (default 60000); a longer one is answered as it is. */
  readonly maxRetryWaitMs?: number | undefined
}

export type RequestBody = NonNullable<RequestInit["body"]>

/**
 * A body's chunks as they arrive, read only when asked for (through a reader: not every
 * ReadableStream type is async-iterable). A consumer that reads slowly slows the server down
 * (the body is not buffered ahead); leaving the loop cancels the body.
 */
export async function* chunks(response: Response): AsyncGenerator<Uint8Array> {
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

export type Query = Record<string, string | number | boolean | undefined>

export interface RequestOptions {
  readonly query?: Query | undefined
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

const queryString = (query: Query | undefined): string => {
  const search = new URLSearchParams()
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) search.set(k, String(v))
  const q = search.toString()
  return q === "" ? "" : `?${q}`
}

/** An answer's `Retry-After` (seconds or an HTTP date) in ms; undefined when it has none. */
const retryAfterMs = (response: Response): number | undefined => {
  const value = response.headers.get("retry-after")
  if (value === null) return undefined
  const seconds = Number(value)
  if (value.trim() !== "" && Number.isFinite(seconds)) return Math.max(0, seconds * 1000)
  const at = Date.parse(value)
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now())
}

/** Read through a call: the flow analysis would take it for the value read before an await. */
const isAborted = (signal: AbortSignal | undefined): boolean => signal?.aborted === true

/** One configured connection to the API; the resources share it. */
export class Http {
  readonly baseUrl: string
  readonly #apiKey: string
  readonly #fetch: typeof globalThis.fetch
  readonly #WebSocket: WebSocketConstructor | undefined
  readonly #maxRetries: number
  readonly #maxRetryWaitMs: number

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
    this.#WebSocket = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket
    this.#maxRetries = options.maxRetries ?? 2
    this.#maxRetryWaitMs = options.maxRetryWaitMs ?? 60_000
  }

  url(path: string, query?: Query): string {
    return `${this.baseUrl}${path}${queryString(query)}`
  }

  /**
   * A WebSocket to `path` (`ws:`/`wss:` of the base URL) with the key in `?token=`: browsers
   * cannot set a WebSocket's headers, and the API takes `?token=` on /terminal only.
   */
  openSocket(path: string, query: Query): WebSocketLike {
    if (this.#WebSocket === undefined) {
      throw new SvcError({
        status: 0,
        code: "websocket_unavailable",
        message: "No WebSocket class: use Node 22+ or pass { WebSocket } to new Svc()"
      })
    }
    const url = `${this.baseUrl.replace(/^http/, "ws")}${path}${queryString({ ...query, token: this.#apiKey })}`
    return new this.#WebSocket(url)
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
    const replayable = body === undefined || typeof body === "string" || body instanceof Uint8Array
    for (let attempt = 0;; attempt++) {
      let response: Response
      try {
        response = await this.#fetch(this.url(path, options.query), {
          method,
          headers,
          ...(body !== undefined ? { body } : {}),
          // A streamed body (an upload read as it is sent) needs half duplex in fetch.
          ...(typeof ReadableStream !== "undefined" && body instanceof ReadableStream
            ? ({ duplex: "half" } as RequestInit)
            : {}),
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
      if (response.ok) return response
      // A refusal that did nothing and says when to come back (429 `rate_limited`, 503
      // `no_capacity`): sent again after that wait, a few times.
      const wait = retryAfterMs(response)
      const error = await errorOf(response)
      const retry = (response.status === 429 || response.status === 503) && wait !== undefined && replayable &&
        attempt < this.#maxRetries && wait <= this.#maxRetryWaitMs
      if (!retry || options.signal?.aborted === true) throw error
      await sleep(wait, options.signal)
      // Aborted while it waited: the refusal is the answer.
      if (isAborted(options.signal)) throw error
    }
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

// ---------------------------------------------------------------------------------------------
// Helpers of the resources

/** A path segment. */
export const segment = (value: string | number) => encodeURIComponent(String(value))

export const fromBase64 = (text: string): Uint8Array => Uint8Array.from(atob(text), (c) => c.charCodeAt(0))

export const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal?.removeEventListener("abort", done)
      resolve()
    }
    signal?.addEventListener("abort", done, { once: true })
  })

export const timeoutError = (what: string, timeoutMs: number, details?: Readonly<Record<string, unknown>>) =>
  new SvcError({
    status: 0,
    code: "timeout",
    message: `${what} after ${Math.round(timeoutMs / 1000)} s`,
    ...(details !== undefined ? { details } : {})
  })

/** Polls `read` until `done` says so; the delay grows from 100 ms to 1 s. */
export const poll = async <A>(
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
    if (Date.now() + delay > deadline) throw timeoutError(options.what, options.timeoutMs)
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

export const DEFAULT_WAIT_MS = 300_000

export type Page<K extends string, A> = { readonly [P in K]: ReadonlyArray<A> } & {
  readonly total: number
  readonly offset: number
  readonly limit: number
  readonly has_more: boolean
}

/** An `Idempotency-Key` header when one is given. */
export const idempotency = (options: { readonly idempotencyKey?: string | undefined }) => ({
  "idempotency-key": options.idempotencyKey
})
