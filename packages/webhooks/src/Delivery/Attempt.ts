/**
 * One delivery attempt (docs/contract.md#retries): a POST that must be answered 2xx within the
 * timeout. Redirects are never followed (a 3xx is a failure). The connection only goes to addresses
 * the guard checked for this attempt: the guard resolves once, and the request's `lookup` answers
 * from that checked list, so no second DNS answer can slip in between check and connect.
 *
 * Uses node:http/node:https directly rather than fetch: fetch cannot pin the address it connects
 * to while keeping the URL's Host header and TLS servername.
 */
import { Context, Effect, Layer } from "effect"
import type * as dns from "node:dns"
import * as http from "node:http"
import * as https from "node:https"
import { performance } from "node:perf_hooks"
import * as tls from "node:tls"
import { type ConnectTarget, type ResolvedAddress, WebhookAddressGuard } from "../Subscriptions/AddressGuard.ts"

export const DEFAULT_ATTEMPT_TIMEOUT_MS = 5_000
/** Response bodies are read up to this and thrown away; a longer one closes the connection. */
export const MAX_RESPONSE_BYTES = 64 * 1024
const MAX_ERROR_LENGTH = 200
const USER_AGENT = "svc-webhooks/1"

export interface AttemptRequest {
  readonly url: string
  /** The exact bytes to send (and that were signed). */
  readonly body: Uint8Array
  /** Delivery headers (see Signature.deliveryHeaders); Host and framing headers are ours. */
  readonly headers: Readonly<Record<string, string>>
  /** The whole exchange: connect, send, and the complete response. Default 5000. */
  readonly timeoutMs?: number
}

export interface AttemptResult {
  readonly outcome: "succeeded" | "failed"
  /** The receiver's status code, when one arrived. */
  readonly responseCode: number | null
  /** A short reason for a failure; never contains the body, the secret or an address. */
  readonly error: string | null
  readonly durationMs: number
}

/** Headers the caller may not set: we frame the request and name the host ourselves. */
const RESERVED_HEADERS = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "expect",
  "proxy-authorization",
  "proxy-connection"
])

type Exchange = Omit<AttemptResult, "durationMs">

const failed = (error: string, responseCode: number | null = null): Exchange => ({
  outcome: "failed",
  responseCode,
  error: error.length > MAX_ERROR_LENGTH ? `${error.slice(0, MAX_ERROR_LENGTH - 1)}…` : error
})

const byStatus = (code: number): Exchange =>
  code >= 200 && code <= 299
    ? { outcome: "succeeded", responseCode: code, error: null }
    : code >= 300 && code <= 399
    ? failed(`redirect not followed (HTTP ${code})`, code)
    : failed(`HTTP ${code}`, code)

const TLS_CODE = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO|SELF_SIGNED|HOSTNAME_)/

/** Maps a socket/HTTP error to a short reason from its code only (messages name addresses). */
const describeError = (cause: unknown): string => {
  const err = cause as (NodeJS.ErrnoException & { errors?: ReadonlyArray<NodeJS.ErrnoException> }) | undefined
  const code = err?.code ?? err?.errors?.[0]?.code
  switch (code) {
    case "ECONNREFUSED":
      return "connection refused"
    case "ECONNRESET":
      return "connection reset"
    case "EPIPE":
      return "connection closed while sending"
    case "ETIMEDOUT":
      return "connect timed out"
    case "ENETUNREACH":
      return "network unreachable"
    case "EHOSTUNREACH":
      return "host unreachable"
    case "ERR_INVALID_CHAR":
    case "ERR_INVALID_HTTP_TOKEN":
    case "ERR_HTTP_INVALID_HEADER_VALUE":
      return "invalid request header"
    case undefined:
      return "request failed"
    default:
      if (TLS_CODE.test(code)) return `tls: ${code}`
      if (code.startsWith("HPE_")) return `invalid HTTP response (${code})`
      return `request failed (${code})`
  }
}

/**
 * A `lookup` that answers only from the checked addresses: Node's connect (with happy eyeballs
 * across them) never asks DNS itself. IP-literal hosts skip lookup altogether.
 */
const pinnedLookup = (addresses: ReadonlyArray<ResolvedAddress>) =>
  ((_hostname: string, options: dns.LookupOptions, callback: (...args: Array<unknown>) => void) => {
    const wanted = options.family === 4 || options.family === 6 ? options.family : 0
    const usable = addresses.filter((entry) => wanted === 0 || entry.family === wanted)
    if (usable.length === 0) {
      const error: NodeJS.ErrnoException = new Error("no checked address of the requested family")
      error.code = "ENOTFOUND"
      return process.nextTick(callback, error, options.all ? [] : undefined)
    }
    if (options.all) return process.nextTick(callback, null, usable.map((entry) => ({ ...entry })))
    process.nextTick(callback, null, usable[0]!.address, usable[0]!.family)
  }) as unknown as NonNullable<http.RequestOptions["lookup"]>

interface Agents {
  readonly http: http.Agent
  readonly https: https.Agent
}

/** Sends once over the agent; a stale keep-alive socket (reset before any response) gets one fresh retry. */
const exchange = (target: ConnectTarget, request: AttemptRequest, agents: Agents, timeoutMs: number) =>
  Effect.callback<Exchange>((resume) => {
    let settled = false
    let timedOut = false
    let current: http.ClientRequest | undefined
    let responseCode: number | null = null
    const finish = (result: Exchange) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      // Resume after Node has put the keep-alive socket back in the pool (it does so on a later
      // tick than 'end'), so a following attempt to the same receiver reuses it.
      setImmediate(() => resume(Effect.succeed(result)))
    }
    // One deadline for everything, so a receiver cannot stretch an attempt by trickling bytes.
    const timer = setTimeout(() => {
      timedOut = true
      current?.destroy()
      finish(failed(`timeout after ${timeoutMs} ms`, responseCode))
    }, timeoutMs)

    const headers: Record<string, string | number> = { "user-agent": USER_AGENT }
    for (const [name, value] of Object.entries(request.headers)) {
      if (!RESERVED_HEADERS.has(name.toLowerCase())) headers[name.toLowerCase()] = value
    }
    headers["host"] = new URL(target.url).host
    headers["content-length"] = request.body.byteLength

    const send = (allowRetry: boolean) => {
      let req: http.ClientRequest
      try {
        const options: https.RequestOptions = {
          method: "POST",
          host: target.hostname,
          port: target.port,
          path: target.path,
          headers,
          // Node's default autoSelectFamily tries the checked addresses happy-eyeballs style.
          lookup: pinnedLookup(target.addresses)
        }
        req = target.protocol === "https:"
          ? https.request({ ...options, agent: agents.https })
          : http.request({ ...options, agent: agents.http })
      } catch (cause) {
        return finish(failed(describeError(cause)))
      }
      current = req
      req.on("error", (cause) => {
        if (settled || timedOut) return
        const code = (cause as NodeJS.ErrnoException).code
        if (allowRetry && req.reusedSocket && responseCode === null && (code === "ECONNRESET" || code === "EPIPE")) {
          return send(false)
        }
        finish(failed(describeError(cause), responseCode))
      })
      req.on("response", (res) => {
        responseCode = res.statusCode ?? 0
        let seen = 0
        let ended = false
        res.on("data", (chunk: Buffer) => {
          seen += chunk.byteLength
          if (seen > MAX_RESPONSE_BYTES) {
            // Stop reading; the status already decided. The socket is not reused.
            res.destroy()
            finish(byStatus(responseCode!))
          }
        })
        res.on("end", () => {
          ended = true
          finish(byStatus(responseCode!))
        })
        res.on("error", () => {})
        res.on("close", () => {
          if (!ended) finish(failed(`response aborted (HTTP ${responseCode})`, responseCode))
        })
      })
      req.end(request.body)
    }
    send(true)

    return Effect.sync(() => {
      settled = true
      clearTimeout(timer)
      current?.destroy()
    })
  })

export interface WebhookSenderOptions {
  /** Extra trusted CA certificates (PEM) on top of Node's defaults; for tests with a private CA. */
  readonly ca?: string | ReadonlyArray<string>
  /** How long an idle keep-alive connection is kept. Default 15 s. */
  readonly idleTimeoutMs?: number
}

/**
 * Sends delivery attempts over keep-alive agents (one pool per host name and port). A pooled
 * connection only ever went to an address the guard had checked, and an address's class does
 * not change, so reuse cannot reach a non-public address.
 */
export class WebhookSender extends Context.Service<WebhookSender, {
  readonly attempt: (request: AttemptRequest) => Effect.Effect<AttemptResult>
}>()("@svc/webhooks/Attempt/WebhookSender") {
  static readonly make = Effect.fnUntraced(function*(options: WebhookSenderOptions = {}) {
    const guard = yield* WebhookAddressGuard
    const idle = options.idleTimeoutMs ?? 15_000
    const agents = yield* Effect.acquireRelease(
      Effect.sync((): Agents => ({
        http: new http.Agent({ keepAlive: true, timeout: idle }),
        https: new https.Agent({
          keepAlive: true,
          timeout: idle,
          // Passing `ca` replaces Node's bundled roots, so keep them beside the extra CA.
          ...(options.ca === undefined ? {} : { ca: [...tls.rootCertificates, ...[options.ca].flat()] })
        })
      })),
      (agents) =>
        Effect.sync(() => {
          agents.http.destroy()
          agents.https.destroy()
        })
    )

    // Once per delivery: untraced (a span and a stack capture per call were ~3 % of a delivery).
    const attempt = Effect.fnUntraced(function*(request: AttemptRequest) {
      const started = performance.now()
      const timeoutMs = request.timeoutMs ?? DEFAULT_ATTEMPT_TIMEOUT_MS
      const result: Exchange = yield* guard.connectTarget(request.url).pipe(
        Effect.matchEffect({
          onFailure: (refused) => Effect.succeed(failed(`refused: ${refused.message}`)),
          onSuccess: (target) => exchange(target, request, agents, timeoutMs)
        })
      )
      return { ...result, durationMs: Math.round(performance.now() - started) }
    })

    return WebhookSender.of({ attempt })
  })

  /** Needs a `WebhookAddressGuard`; agents are closed when the layer's scope ends. */
  static readonly layer = Layer.effect(WebhookSender)(WebhookSender.make())

  static readonly layerWith = (options: WebhookSenderOptions) =>
    Layer.effect(WebhookSender)(WebhookSender.make(options))
}

/** One attempt with the `WebhookSender` in context. */
export const attempt = (request: AttemptRequest) => WebhookSender.use((sender) => sender.attempt(request))
