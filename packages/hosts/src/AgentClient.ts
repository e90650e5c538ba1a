/**
 * The control plane's one client of the agents' data plane, derived from its definition
 * (`@svc/host-protocol/DataPlane`), so a route, schema or error changed there fails to typecheck
 * here. Exec, files and processes go from the API process straight to the sandbox's host over HTTP, with
 * the host's endpoint and bearer token from the `hosts` KV. The agent's errors become the API's;
 * anything else it answers, or a host that cannot be reached, is 503 `unavailable` (the details
 * go to the log only).
 *
 * `node:http` (`NodeHttpClient`) with keep-alive connections: it streams a request body with
 * backpressure (a chunk is read from the client only once the host took the previous one), where
 * `fetch` reads a streamed body as fast as the client sends it and would hold the difference (up
 * to the whole upload) in this process. A host may answer an upload before its body is through
 * (a refusal): that answer is the result. A large file's bytes between plain connections skip
 * this process's event loop: the kernel splices them (Splice.ts).
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import type { FileListing } from "@svc/domain/Api/Sandboxes"
import * as Errors from "@svc/domain/Errors"
import {
  AgentApi,
  AgentBusy,
  AgentConflict,
  type AgentExecRequest,
  type AgentExecResult,
  AgentFileListing,
  AgentInsufficientStorage,
  AgentInvalid,
  AgentNotFound,
  AgentNotRunning,
  AgentRateLimited,
  AgentRefused,
  type AgentSandboxStats,
  AgentSpliceResult,
  AgentTooLarge,
  SPLICE_MIN_BYTES,
  SPLICE_PROTOCOL,
  SPLICE_SIZE_HEADER
} from "@svc/host-protocol/DataPlane"
import type { HostRecord } from "@svc/host-protocol/Protocol"
import * as TransferMemory from "@svc/host-protocol/TransferMemory"
import { Context, Effect, Layer, Option, Schema, type Scope, Stream } from "effect"
import { HttpClient, HttpClientError, HttpClientRequest, HttpIncomingMessage } from "effect/http"
import { HttpApiClient } from "effect/http-api"
import * as Http from "node:http"
import * as Https from "node:https"
import type * as Net from "node:net"
import type { Readable } from "node:stream"
import * as Splice from "./Splice.ts"

export type DataPlaneError =
  | Errors.InvalidRequest
  | Errors.NotFound
  | Errors.Conflict
  | Errors.PayloadTooLarge
  | Errors.FileRefused
  | Errors.InsufficientStorage
  | Errors.RateLimited
  | Errors.Unavailable

/** An exec touches no file of the file API: the host never answers `refused` or `rate_limited` to it. */
export type ExecError = Exclude<DataPlaneError, Errors.FileRefused | Errors.RateLimited | Errors.InsufficientStorage>

/** File management (stat, mkdir, move, remove) moves no bytes: never 413 nor `rate_limited`. */
export type FileOpError = Exclude<
  DataPlaneError,
  Errors.PayloadTooLarge | Errors.RateLimited | Errors.InsufficientStorage
>

/** Stats read a running sandbox's usage: it is there or not, running or not, or the host fails. */
export type StatsError = Errors.NotFound | Errors.Conflict | Errors.Unavailable

export type FileContent =
  | {
    readonly _tag: "Bytes"
    readonly size: number | null
    /**
     * The host's response body, to be piped to the client (no effect per chunk). It ends only
     * when the host sent every byte; a host that stops or a read past its deadline destroys it
     * (the client then sees a cut body, never an end).
     */
    readonly readable: Readable
    /**
     * The bytes to go to `response`'s connection by the kernel instead (Splice.ts), when both
     * connections allow it; called before `readable` is read, which then carries no byte and
     * ends once all moved. True: the response's length and its connection's close are set.
     */
    readonly spliceInto?: (client: Splice.ClientConnection) => boolean
  }
  | { readonly _tag: "Listing"; readonly listing: FileListing }

/** An upload's file: its mode in octal ("0644") and whether missing folders are made. */
export interface WriteOptions {
  readonly mode?: string
  readonly parents?: "true" | "false"
}

/** How long a call that is not a stream or a transfer may take. */
const CALL_TIMEOUT_MS = 60_000
/** How long an exec may wait beyond its own timeout (the host's share). */
const EXEC_MARGIN_MS = 15_000
/** When a request names no timeout (the API always names one). */
const EXEC_DEFAULT_TIMEOUT_MS = 60_000
/** How long a transfer may take, start to end (as the host's own transfer timeout). */
const TRANSFER_TIMEOUT_MS = 600_000
/** How long an archive may take, start to end (as the host's own); the idle bound ends a stalled one. */
const ARCHIVE_TIMEOUT_MS = 3_600_000
/** Reading usage is a few file reads on the host. */
const STATS_TIMEOUT_MS = 10_000

/** The host a call goes to (its `HostRecord`: endpoint and bearer token). */
export class AgentTarget extends Context.Service<AgentTarget, HostRecord>()("@svc/hosts/AgentClient/AgentTarget") {}

/** The client derived from the data plane's declaration; each call names its host (`AgentTarget`). */
export type AgentApiClient = HttpApiClient.ForApi<typeof AgentApi, never, AgentTarget>

export const unreachable = (host: HostRecord, cause: unknown) =>
  Effect.andThen(
    Effect.logWarning("data plane: host unreachable", { hostId: host.hostId, cause: String(cause) }),
    Effect.fail(new Errors.Unavailable({ error: "The sandbox's host cannot be reached; retry" }))
  )

const hostFailed = (host: HostRecord, detail: Record<string, unknown>) =>
  Effect.andThen(
    Effect.logWarning("data plane: host failed the request", { hostId: host.hostId, ...detail }),
    Effect.fail(new Errors.Unavailable({ error: "The sandbox's host could not carry out the request; retry" }))
  )

/**
 * What a data-plane call failed with, as the API's error: the agent's declared errors map one to
 * one; `unauthorized`, `failed`, an undeclared answer or an unreadable one are the host failing
 * the request; no answer at all is the host being unreachable.
 */
export const toApiError = (host: HostRecord, error: unknown): Effect.Effect<never, DataPlaneError> => {
  if (error instanceof AgentInvalid) return Effect.fail(new Errors.InvalidRequest({ error: error.error }))
  if (error instanceof AgentConflict) return Effect.fail(new Errors.Conflict({ error: error.error }))
  if (error instanceof AgentNotFound) return Effect.fail(new Errors.NotFound({ error: error.error }))
  if (error instanceof AgentNotRunning) return Effect.fail(new Errors.Conflict({ error: error.error }))
  if (error instanceof AgentTooLarge) return Effect.fail(new Errors.PayloadTooLarge({ error: error.error }))
  if (error instanceof AgentInsufficientStorage) {
    return Effect.fail(
      new Errors.InsufficientStorage({ error: `The upload does not fit the sandbox's disk: ${error.error}` })
    )
  }
  if (error instanceof AgentRefused) {
    return Effect.fail(
      new Errors.FileRefused({
        error: `The sandbox's kernel refused the file operation: ${error.error}${
          error.errno !== undefined ? ` (${error.errno})` : ""
        }`,
        errno: error.errno ?? "EIO"
      })
    )
  }
  if (error instanceof AgentRateLimited) {
    return Effect.fail(
      new Errors.RateLimited({
        error: "The org runs as many file transfers on the sandbox's host as one org may; retry",
        retry_after_s: 1
      })
    )
  }
  if (error instanceof AgentBusy) {
    return Effect.fail(
      new Errors.Unavailable({ error: "The sandbox's host runs as many file transfers as it allows; retry" })
    )
  }
  if (HttpClientError.isHttpClientError(error)) {
    const reason = error.reason
    if (reason._tag === "TransportError") return unreachable(host, reason.cause ?? reason.description)
    if (reason._tag === "StatusCodeError" || reason._tag === "DecodeError") {
      return hostFailed(host, { status: reason.response.status, description: reason.description })
    }
    return unreachable(host, error)
  }
  if (Schema.isSchemaError(error)) return unreachable(host, error)
  // `unauthorized` and `failed`: the host's own refusal of a request the API built.
  const body = error as { readonly error?: unknown; readonly reason?: unknown }
  return hostFailed(host, { reason: body.reason, error: body.error })
}

/** Bytes of a listing read whole from the host (a folder of many entries). */
const MAX_LISTING_BYTES = 64 * 1024 * 1024
/** Bytes of an error body read from the host. */
const MAX_ERROR_BYTES = 64 * 1024

/** Connections kept open to the hosts for the transfers sent outside the derived client. */
const agents = { http: new Http.Agent({ keepAlive: true }), https: new Https.Agent({ keepAlive: true }) }
/**
 * A connection per spliced transfer, never reused: the host ends one it answered plainly (an
 * upgrade request's connection is no longer its HTTP server's), so a kept one would take the
 * next request into a connection nobody reads.
 */
const spliceAgents = { http: new Http.Agent({ keepAlive: false }), https: new Https.Agent({ keepAlive: false }) }

/** A files route of the data plane (`AgentApi`'s `readFile`, `writeFile`) with its query. */
const filesPath = (sandboxId: string, query: Record<string, string>) =>
  `/sandboxes/${encodeURIComponent(sandboxId)}/files?${new URLSearchParams(query).toString()}`

/**
 * A transfer's request to the host over `node:http`, outside the derived client: the body (a
 * client's request) is piped in and the response is handed on as it is, with no effect per
 * chunk (through the derived client's streams, each of the API and the agent spent 2.5-4.5
 * CPU-seconds per GiB). Completes with the response's head; an upload's body is piped until
 * the host answers (an early answer is a refusal: the rest of the body is left unread). More
 * than `maxBytes` is 413 and a body that fails (its client went away) 400, the host's request
 * cut short in both cases, so that it keeps nothing. Interrupted: the host's request is ended.
 */
const send = (
  host: HostRecord,
  method: "GET" | "PUT",
  path: string,
  upload?: { readonly body: Readable; readonly maxBytes: number }
): Effect.Effect<Http.IncomingMessage, DataPlaneError> =>
  Effect.callback<Http.IncomingMessage, DataPlaneError>((resume) => {
    let request: Http.ClientRequest
    try {
      request = hostRequest(
        host,
        method,
        path,
        upload !== undefined ? { "content-type": "application/octet-stream", "transfer-encoding": "chunked" } : {}
      )
    } catch (e) {
      return resume(unreachable(host, e))
    }
    let done = false
    const body = upload?.body
    const finish = (result: Effect.Effect<Http.IncomingMessage, DataPlaneError>) => {
      if (done) return
      done = true
      detach()
      resume(result)
    }
    const unwatch = body === undefined
      ? () => undefined
      : watchBody(body, upload!.maxBytes, () => request.destroy(), (e) => finish(Effect.fail(e)))
    const detach = () => {
      unwatch()
      body?.unpipe(request)
    }
    request.once("response", (response) => {
      // An answer before the whole body (a refusal): nothing more is sent, and the connection
      // (its request unfinished) goes once the answer was read.
      if (body !== undefined && !body.readableEnded) response.once("close", () => request.destroy())
      finish(Effect.succeed(response))
    })
    request.once("error", (e) => finish(unreachable(host, e)))
    if (body === undefined) request.end()
    else body.pipe(request)
    return Effect.sync(() => {
      if (done) return
      done = true
      detach()
      request.destroy()
    })
  })

/** A request to the host over `node:http` (its keep-alive connections), with its token; throws on an endpoint that is no URL. */
const hostRequest = (
  host: HostRecord,
  method: "GET" | "PUT",
  path: string,
  headers: Record<string, string>,
  pool: typeof agents = agents
): Http.ClientRequest => {
  const url = new URL(host.endpoint.replace(/\/+$/, "") + path)
  const https = url.protocol === "https:"
  return (https ? Https.request : Http.request)(url, {
    method,
    agent: https ? pool.https : pool.http,
    headers: { authorization: `Bearer ${host.token}`, ...headers }
  })
}

/**
 * Watches an upload's body (a client's request) while it is piped to the host: more than
 * `maxBytes` is 413 and a body that fails, or ends or closes before all of it came (its client
 * went away), 400; `cut` runs first (the host's side ended so that it keeps nothing). Returns
 * the watch's removal.
 */
const watchBody = (
  body: Readable,
  maxBytes: number,
  cut: () => void,
  fail: (error: DataPlaneError) => void
): () => void => {
  let total = 0
  const count = (chunk: Buffer) => {
    total += chunk.length
    if (total > maxBytes) {
      cut()
      fail(new Errors.PayloadTooLarge({ error: `Uploads are limited to ${maxBytes} bytes` }))
    }
  }
  const failed = () => {
    cut()
    fail(new Errors.InvalidRequest({ error: "The request body could not be read" }))
  }
  const closed = () => {
    if (!body.readableEnded) failed()
  }
  const ended = () => {
    if ("complete" in body && body.complete === false) failed()
  }
  body.on("data", count)
  body.once("error", failed)
  body.once("close", closed)
  body.once("end", ended)
  return () => {
    body.off("data", count)
    body.off("error", failed)
    body.off("close", closed)
    body.off("end", ended)
  }
}

/** A spliced transfer's request answered: plainly (a refusal, a listing, a small file), or switched to the transfer's bytes. */
type Spliced =
  | { readonly _tag: "Plain"; readonly response: Http.IncomingMessage }
  | {
    readonly _tag: "Switched"
    readonly response: Http.IncomingMessage
    readonly socket: Net.Socket
    readonly head: Buffer
  }

/**
 * A transfer's request asking for its bytes spliced by the host's kernel (`SPLICE_PROTOCOL`):
 * `Upgrade: svc-splice`, no body. Interrupted before the answer: the request is ended.
 */
const askSplice = (host: HostRecord, method: "GET" | "PUT", path: string): Effect.Effect<Spliced, DataPlaneError> =>
  Effect.callback<Spliced, DataPlaneError>((resume) => {
    let request: Http.ClientRequest
    try {
      request = hostRequest(host, method, path, {
        connection: "Upgrade",
        upgrade: SPLICE_PROTOCOL,
        "content-length": "0"
      }, spliceAgents)
    } catch (e) {
      return resume(unreachable(host, e))
    }
    let done = false
    request.once("upgrade", (response, socket: Net.Socket, head: Buffer) => {
      if (done) return socket.destroy()
      done = true
      socket.on("error", () => undefined)
      resume(Effect.succeed({ _tag: "Switched", response, socket, head }))
    })
    request.once("response", (response) => {
      if (done) return response.destroy()
      done = true
      resume(Effect.succeed({ _tag: "Plain", response }))
    })
    request.once("error", (e) => {
      if (done) return
      done = true
      resume(unreachable(host, e))
    })
    request.end()
    return Effect.sync(() => {
      if (done) return
      done = true
      request.destroy()
    })
  })

/**
 * A spliced upload: the client's body written into the switched connection (at most
 * `maxBytes`), or with `splicer` moved there by the kernel (a body of declared length between
 * plain connections: Splice.ts), the connection's side then ended, and the host's one
 * `AgentSpliceResult` line read. An early answer (a refusal: the disk full) stops the body there. A body that fails (its
 * client went away) resets the connection, so that the host keeps nothing.
 */
const spliceUpload = (
  host: HostRecord,
  socket: Net.Socket,
  head: Buffer,
  body: Readable,
  maxBytes: number,
  splicer?: { readonly binary: string; readonly client: Splice.ClientConnection }
): Effect.Effect<void, DataPlaneError> =>
  Effect.callback<unknown, DataPlaneError>((resume) => {
    let done = false
    const answer: Array<Buffer> = head.length > 0 ? [head] : []
    let answerBytes = head.length
    const finish = (result: Effect.Effect<unknown, DataPlaneError>) => {
      if (done) return
      done = true
      detach()
      resume(result)
    }
    const cutBody = () =>
      finish(Effect.fail(new Errors.InvalidRequest({ error: "The request body could not be read" })))
    let detach: () => void
    if (splicer !== undefined && Splice.canSpliceBody(body, socket)) {
      // The kernel moves the body (Splice.ts); what ends it early says whose the failure is.
      const abort = new AbortController()
      detach = () => abort.abort()
      Splice.spliceBody(splicer.binary, body, socket, splicer.client, abort.signal).then(
        () => socket.end(),
        (e: unknown) => {
          if (done) return
          const failed = e instanceof Splice.SplicerFailed ? e : undefined
          // The host stopped reading (it answers why, or it went: `close`): its answer decides.
          if (failed === undefined || failed.side === "to") return
          // A reset, not an end: the host must not take a cut body for a whole one.
          socket.resetAndDestroy()
          if (failed.side === "from") return cutBody()
          // Idle (as the connection's own idle bound would end it), or the splicer itself failing.
          if (failed.errno === Splice.ETIMEDOUT) {
            body.socket.destroy()
            return cutBody()
          }
          finish(hostFailed(host, { splice: failed.message }))
        }
      )
    } else {
      // A reset, not an end: the host must not take a cut body for a whole one.
      const unwatch = watchBody(body, maxBytes, () => socket.resetAndDestroy(), (e) => finish(Effect.fail(e)))
      detach = () => {
        unwatch()
        body.unpipe(socket)
      }
      // `pipe` ends the connection's side once the body ended; the answer follows.
      body.pipe(socket)
    }
    socket.on("data", (chunk: Buffer) => {
      answerBytes += chunk.length
      if (answerBytes > MAX_ERROR_BYTES) {
        socket.destroy()
        return finish(hostFailed(host, { splice: "an answer larger than 64 KiB" }))
      }
      answer.push(chunk)
    })
    socket.once("end", () => {
      socket.destroy()
      try {
        finish(Effect.succeed(JSON.parse(Buffer.concat(answer).toString("utf8"))))
      } catch (e) {
        finish(hostFailed(host, { splice: `an answer that is not JSON: ${String(e)}` }))
      }
    })
    socket.once("close", () => finish(unreachable(host, "the host closed the transfer without an answer")))
    socket.once("error", (e) => finish(unreachable(host, e)))
    return Effect.sync(() => {
      if (done) return
      done = true
      detach()
      socket.resetAndDestroy()
    })
  }).pipe(
    Effect.flatMap((answer) =>
      Effect.flatMap(
        Effect.orElseSucceed(Schema.decodeUnknownEffect(AgentSpliceResult)(answer), () => undefined),
        (result): Effect.Effect<void, DataPlaneError> =>
          result === undefined
            ? hostFailed(host, { splice: String(JSON.stringify(answer)).slice(0, 512) })
            : result.status === 204
            ? Effect.void
            : Option.match(decodeRefusal(result.body), {
              onSome: (refusal) => toApiError(host, refusal),
              onNone: () =>
                hostFailed(host, { status: result.status, body: String(JSON.stringify(result.body)).slice(0, 512) })
            })
      )
    )
  )

/**
 * Tells a client that waits for it (`Expect: 100-continue`, as curl sends for bodies over
 * 1 MiB) to send its body, once the host takes it: read directly, the body is not the
 * framework's, which would answer only when it read it itself (curl waited 1 s, then sent).
 */
const proceed = (body: Readable, client: Splice.ClientConnection | undefined) => {
  const expect = (body as Partial<Http.IncomingMessage>).headers?.["expect"]
  if (client !== undefined && expect?.toLowerCase() === "100-continue" && !client.response.headersSent) {
    client.response.writeContinue()
  }
}

/**
 * A download's bytes stop past the transfer's deadline (the client sees a cut body); `closed`
 * runs once the stream closes, however it ends.
 */
const untilDeadline = <R extends Readable>(readable: R, closed: () => void): R => {
  const deadline = setTimeout(
    () => readable.destroy(new Error("the host's file transfer passed its deadline")),
    TRANSFER_TIMEOUT_MS
  )
  readable.once("close", () => {
    clearTimeout(deadline)
    closed()
  })
  return readable
}

/** A host's answer that could not be read (cut, too large, not JSON). */
class AnswerUnreadable extends Schema.TaggedError<AnswerUnreadable>()("AnswerUnreadable", {
  message: Schema.String
}) {}

/** A response's body read whole (at most `max` bytes) and parsed as JSON. */
const readJson = (response: Http.IncomingMessage, max: number): Effect.Effect<unknown, AnswerUnreadable> =>
  Effect.callback<unknown, AnswerUnreadable>((resume) => {
    const failed = (message: string) => resume(Effect.fail(new AnswerUnreadable({ message })))
    const chunks: Array<Buffer> = []
    let size = 0
    response.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size > max) {
        response.destroy()
        return failed(`an answer larger than ${max} bytes`)
      }
      chunks.push(chunk)
    })
    response.once("end", () => {
      try {
        resume(Effect.succeed(JSON.parse(Buffer.concat(chunks).toString("utf8"))))
      } catch (e) {
        failed(`not JSON: ${String(e)}`)
      }
    })
    response.once("error", (e) => failed(String(e)))
    response.once("close", () => response.complete || failed("the answer was cut"))
    return Effect.sync(() => response.destroy())
  })

/**
 * The host's refusal (its body `{error, reason, errno?}`, `@svc/host-protocol/DataPlane`) as
 * the API's error, as the derived client decodes it; any other answer is the host failing.
 */
const AgentRefusal = Schema.Union([
  AgentInvalid,
  AgentNotFound,
  AgentNotRunning,
  AgentTooLarge,
  AgentRefused,
  AgentConflict,
  AgentBusy,
  AgentRateLimited,
  AgentInsufficientStorage
])
const decodeRefusal = Schema.decodeUnknownOption(AgentRefusal)

const refusalOf = (host: HostRecord, response: Http.IncomingMessage): Effect.Effect<never, DataPlaneError> =>
  Effect.flatMap(
    Effect.orElseSucceed(readJson(response, MAX_ERROR_BYTES), () => undefined),
    (body) =>
      Option.match(decodeRefusal(body), {
        onSome: (refusal) => toApiError(host, refusal),
        // Undeclared or unreadable: the host failing the request.
        onNone: () =>
          hostFailed(host, { status: response.statusCode, body: String(JSON.stringify(body)).slice(0, 512) })
      })
  )

export class AgentClient extends Context.Service<AgentClient, {
  /** The derived client, for the calls that have no method here (processes); run through `call`. */
  readonly api: AgentApiClient
  /**
   * A call of `api` to `host` with no answer size limit: the agent's refusals as the API's
   * errors, a silent host (past `timeoutMs`, 60 s by default) 503.
   */
  call<A, E>(
    host: HostRecord,
    effect: Effect.Effect<A, E, AgentTarget>,
    timeoutMs?: number
  ): Effect.Effect<A, ExecError>
  /**
   * A file management call of `api.files` (stat, mkdir, move, remove) to `host`: as `call`, but
   * the sandbox kernel's refusals stay 422 `file_refused` (no transfer: never `rate_limited`).
   */
  files<A, E>(
    host: HostRecord,
    effect: Effect.Effect<A, E, AgentTarget>
  ): Effect.Effect<A, FileOpError>
  /** Runs a command; waits up to its own timeout plus a margin for the host. */
  exec(host: HostRecord, sandboxId: string, body: AgentExecRequest): Effect.Effect<AgentExecResult, ExecError>
  /**
   * A file's bytes (streamed from the host) or a folder's listing; `org` takes its share of the
   * host's slots. The bytes' request to the host is ended when the scope closes; the transfer
   * is in flight (TransferMemory.ts) until the bytes end or the scope closes.
   */
  readFile(
    host: HostRecord,
    sandboxId: string,
    path: string,
    org?: string
  ): Effect.Effect<FileContent, DataPlaneError, Scope.Scope>
  /** The running sandbox's usage now (cgroups, network link). */
  stats(host: HostRecord, sandboxId: string): Effect.Effect<AgentSandboxStats, StatsError>
  /** A fork's snapshot: the running sandbox's writable layer copied into the layer `layer` on its host. */
  forkSnapshot(host: HostRecord, sandboxId: string, layer: string): Effect.Effect<void, StatsError>
  /**
   * Writes `body` (a client's request: at most `maxBytes`; more is 413 `payload_too_large`, the
   * transfer cut short) to the file at `path`, piped through with backpressure.
   */
  writeFile(
    host: HostRecord,
    sandboxId: string,
    path: string,
    body: Readable,
    maxBytes: number,
    org?: string,
    options?: WriteOptions,
    /** The client's connection: with it, a body of declared length goes by the kernel (Splice.ts). */
    client?: Splice.ClientConnection
  ): Effect.Effect<void, DataPlaneError>
  /**
   * A folder as a tar (or tar.gz) stream from the host; refusals before the first byte. The
   * transfer is in flight (TransferMemory.ts) until the stream ends or the scope closes.
   */
  readArchive(
    host: HostRecord,
    sandboxId: string,
    path: string,
    format: "tar" | "tar.gz",
    org?: string
  ): Effect.Effect<Stream.Stream<Uint8Array, Errors.Unavailable>, DataPlaneError, Scope.Scope>
  /** Streams a tar (or tar.gz) `body` to the host, extracted under `path` (all or nothing). */
  writeArchive<E>(
    host: HostRecord,
    sandboxId: string,
    path: string,
    body: Stream.Stream<Uint8Array, E>,
    format: "tar" | "tar.gz",
    org?: string
  ): Effect.Effect<void, DataPlaneError>
}>()("@svc/hosts/AgentClient") {
  static readonly make = Effect.gen(function*() {
    // Transfers pass through this process (TransferMemory.ts).
    yield* TransferMemory.accountExternalMemoryInHeapLimit
    const splicer = yield* Splice.build
    const http = yield* HttpClient.HttpClient
    // Each call names its host: the base URL and the bearer token come from its record.
    const client = yield* HttpApiClient.makeWith(AgentApi, {
      httpClient: http.pipe(
        HttpClient.mapRequestEffect((request) =>
          Effect.map(Effect.service(AgentTarget), (host) =>
            request.pipe(
              HttpClientRequest.prependUrl(host.endpoint.replace(/\/+$/, "")),
              HttpClientRequest.bearerToken(host.token)
            ))
        )
      )
    })

    const call = <A, E>(host: HostRecord, effect: Effect.Effect<A, E, AgentTarget>, timeoutMs = CALL_TIMEOUT_MS) =>
      effect.pipe(
        Effect.provideService(AgentTarget, host),
        Effect.provideService(HttpIncomingMessage.MaxBodySize, undefined),
        Effect.timeoutOrElse({ duration: timeoutMs, orElse: () => unreachable(host, "call timed out") }),
        Effect.catch((error) => toApiError(host, error)),
        Effect.catchTags({
          FileRefused: (e) => unreachable(host, `a call answered as a file refusal: ${e.error}`),
          RateLimited: (e) => unreachable(host, `a call answered as rate limited: ${e.error}`),
          InsufficientStorage: (e) => unreachable(host, `a call answered as a full disk: ${e.error}`)
        })
      )

    const files = <A, E>(host: HostRecord, effect: Effect.Effect<A, E, AgentTarget>) =>
      effect.pipe(
        Effect.provideService(AgentTarget, host),
        Effect.timeoutOrElse({ duration: CALL_TIMEOUT_MS, orElse: () => unreachable(host, "file call timed out") }),
        Effect.catch((error) => toApiError(host, error)),
        Effect.catchTags({
          RateLimited: (e) => unreachable(host, `a file call answered as rate limited: ${e.error}`),
          PayloadTooLarge: (e) => unreachable(host, `a file call answered as too large: ${e.error}`),
          InsufficientStorage: (e) => unreachable(host, `a file call answered as a full disk: ${e.error}`)
        })
      )

    const exec = Effect.fn("AgentClient.exec")(function*(host: HostRecord, sandboxId: string, body: AgentExecRequest) {
      return yield* client.sandboxes.exec({ params: { id: sandboxId }, payload: body }).pipe(
        Effect.provideService(AgentTarget, host),
        // The caller's request limit (the API's 1 MiB) is not the answer's: two capped outputs
        // of 1 MiB each, JSON-escaped.
        Effect.provideService(HttpIncomingMessage.MaxBodySize, undefined),
        Effect.timeoutOrElse({
          duration: (body.timeout_ms ?? EXEC_DEFAULT_TIMEOUT_MS) + EXEC_MARGIN_MS,
          orElse: () => unreachable(host, "exec timed out")
        }),
        Effect.catch((error) => toApiError(host, error)),
        Effect.catchTags({
          FileRefused: (e) => unreachable(host, `an exec answered as a file refusal: ${e.error}`),
          RateLimited: (e) => unreachable(host, `an exec answered as rate limited: ${e.error}`),
          InsufficientStorage: (e) => unreachable(host, `an exec answered as a full disk: ${e.error}`)
        })
      )
    })

    const stats = Effect.fn("AgentClient.stats")(function*(host: HostRecord, sandboxId: string) {
      return yield* client.sandboxes.stats({ params: { id: sandboxId } }).pipe(
        Effect.provideService(AgentTarget, host),
        Effect.timeoutOrElse({ duration: STATS_TIMEOUT_MS, orElse: () => unreachable(host, "stats timed out") }),
        Effect.catch((error) => toApiError(host, error)),
        // The API checked the id and there is no body: anything but these is the host failing.
        Effect.catchTags({
          FileRefused: (e) => unreachable(host, `stats answered as a file refusal: ${e.error}`),
          RateLimited: (e) => unreachable(host, `stats answered as rate limited: ${e.error}`),
          InsufficientStorage: (e) => unreachable(host, `stats answered as a full disk: ${e.error}`),
          InvalidRequest: (e) => unreachable(host, `stats refused as invalid: ${e.error}`),
          PayloadTooLarge: (e) => unreachable(host, `stats refused as too large: ${e.error}`)
        })
      )
    })

    const forkSnapshot = Effect.fn("AgentClient.forkSnapshot")(
      function*(host: HostRecord, sandboxId: string, layer: string) {
        return yield* client.sandboxes.forkSnapshot({ params: { id: sandboxId }, payload: { layer } }).pipe(
          Effect.provideService(AgentTarget, host),
          // A copy of up to the sandbox's disk: bounded by its size, not by a request's usual time.
          Effect.timeoutOrElse({ duration: TRANSFER_TIMEOUT_MS, orElse: () => unreachable(host, "fork timed out") }),
          Effect.catch((error) => toApiError(host, error)),
          Effect.catchTags({
            FileRefused: (e) => unreachable(host, `a fork answered as a file refusal: ${e.error}`),
            RateLimited: (e) => unreachable(host, `a fork answered as rate limited: ${e.error}`),
            InvalidRequest: (e) => unreachable(host, `a fork refused as invalid: ${e.error}`),
            PayloadTooLarge: (e) => unreachable(host, `a fork refused as too large: ${e.error}`),
            // The host's disk has no room for the copy: nothing forked; a later try may find room.
            InsufficientStorage: () =>
              Effect.fail(
                new Errors.Unavailable({ error: "The sandbox's host has no disk room for the fork now; retry" })
              )
          })
        )
      }
    )

    const readFile = Effect.fn("AgentClient.readFile")(
      function*(host: HostRecord, sandboxId: string, path: string, org?: string) {
        const release = yield* TransferMemory.inFlight
        const answer = yield* Effect.acquireRelease(
          askSplice(host, "GET", filesPath(sandboxId, { path, ...(org !== undefined ? { org } : {}) })).pipe(
            Effect.timeoutOrElse({ duration: TRANSFER_TIMEOUT_MS, orElse: () => unreachable(host, "read timed out") })
          ),
          // Not read to its end (the client went away, a refusal): the host's request ends.
          (answer) =>
            Effect.sync(() =>
              answer._tag === "Switched"
                ? answer.socket.destroy()
                : answer.response.complete || answer.response.destroy()
            )
        )
        if (answer._tag === "Switched") {
          const size = Number(answer.response.headers[SPLICE_SIZE_HEADER])
          if (!Number.isSafeInteger(size) || size < 0) {
            return yield* hostFailed(host, {
              splice: `a size header of ${answer.response.headers[SPLICE_SIZE_HEADER]}`
            })
          }
          const bytes = untilDeadline(new Splice.HostBytes(answer.socket, answer.head, size, splicer), release)
          return {
            _tag: "Bytes",
            size,
            readable: bytes,
            spliceInto: (client) => bytes.spliceInto(client)
          } satisfies FileContent as FileContent
        }
        const response = answer.response
        if (response.statusCode !== 200) return yield* refusalOf(host, response)
        if ((response.headers["content-type"] ?? "").includes("json")) {
          release()
          const listing = yield* readJson(response, MAX_LISTING_BYTES).pipe(
            Effect.flatMap(Schema.decodeUnknownEffect(AgentFileListing)),
            Effect.catch((error) => unreachable(host, error))
          )
          return { _tag: "Listing", listing } satisfies FileContent as FileContent
        }
        untilDeadline(response, release)
        const length = response.headers["content-length"]
        return {
          _tag: "Bytes",
          size: length === undefined ? null : Number(length),
          readable: response
        } satisfies FileContent as FileContent
      }
    )

    const writeFile = (
      host: HostRecord,
      sandboxId: string,
      path: string,
      body: Readable,
      maxBytes: number,
      org?: string,
      options: WriteOptions = {},
      client?: Splice.ClientConnection
    ) =>
      Effect.gen(function*() {
        yield* TransferMemory.inFlight
        const query = { path, ...(org !== undefined ? { org } : {}), ...options }
        // A client's request names its length (or streams it chunked, a length unknown: large, as
        // a rule): a small body goes plainly, where a splice's fork and round trip would cost more.
        const declared = Number((body as Partial<Http.IncomingMessage>).headers?.["content-length"] ?? NaN)
        if (declared > maxBytes) {
          return yield* new Errors.PayloadTooLarge({ error: `Uploads are limited to ${maxBytes} bytes` })
        }
        if (!(declared < SPLICE_MIN_BYTES)) {
          const answer = yield* askSplice(host, "PUT", filesPath(sandboxId, query))
          if (answer._tag === "Switched") {
            proceed(body, client)
            const binary = splicer()
            const spliced = client !== undefined && binary !== undefined ? { binary, client } : undefined
            return yield* spliceUpload(host, answer.socket, answer.head, body, maxBytes, spliced).pipe(
              Effect.timeoutOrElse({
                duration: TRANSFER_TIMEOUT_MS,
                orElse: () => unreachable(host, "upload timed out")
              })
            )
          }
          // Refused before any byte: the body is left unread.
          return yield* refusalOf(host, answer.response)
        }
        proceed(body, client)
        const response = yield* send(host, "PUT", filesPath(sandboxId, query), { body, maxBytes }).pipe(
          Effect.timeoutOrElse({ duration: TRANSFER_TIMEOUT_MS, orElse: () => unreachable(host, "upload timed out") })
        )
        if (response.statusCode === 204) {
          response.resume()
          return
        }
        return yield* refusalOf(host, response)
      }).pipe(Effect.scoped, Effect.withSpan("AgentClient.writeFile"))

    const readArchive = Effect.fn("AgentClient.readArchive")(
      function*(host: HostRecord, sandboxId: string, path: string, format: "tar" | "tar.gz", org?: string) {
        const release = yield* TransferMemory.inFlight
        const content = yield* client.sandboxes.readArchive({
          params: { id: sandboxId },
          query: { path, format, ...(org !== undefined ? { org } : {}) }
        }).pipe(
          Effect.provideService(AgentTarget, host),
          Effect.provideService(HttpIncomingMessage.MaxBodySize, undefined),
          Effect.timeoutOrElse({ duration: CALL_TIMEOUT_MS, orElse: () => unreachable(host, "archive timed out") }),
          Effect.catch((error) => toApiError(host, error))
        )
        const stopped = new Errors.Unavailable({ error: "The sandbox's host stopped sending the archive" })
        return content.pipe(
          Stream.mapError(() => stopped),
          Stream.interruptWhen(Effect.andThen(Effect.sleep(ARCHIVE_TIMEOUT_MS), Effect.fail(stopped))),
          Stream.ensuring(Effect.sync(release))
        )
      }
    )

    const writeArchive = <E>(
      host: HostRecord,
      sandboxId: string,
      path: string,
      body: Stream.Stream<Uint8Array, E>,
      format: "tar" | "tar.gz",
      org?: string
    ) =>
      Effect.flatMap(TransferMemory.inFlight, () => {
        const payload = body.pipe(
          Stream.mapError(() => new Errors.InvalidRequest({ error: "The request body could not be read" }))
        )
        const query = { path, format, ...(org !== undefined ? { org } : {}) }
        return client.sandboxes.writeArchive({ params: { id: sandboxId }, query, payload }).pipe(
          Effect.provideService(AgentTarget, host),
          Effect.timeoutOrElse({ duration: ARCHIVE_TIMEOUT_MS, orElse: () => unreachable(host, "upload timed out") }),
          Effect.catch((error) => {
            // The client's body failed: its own error, not the host's.
            if (HttpClientError.isHttpClientError(error) && error.reason._tag === "EncodeError") {
              const cause = error.reason.cause
              if (cause instanceof Errors.InvalidRequest) return Effect.fail(cause)
            }
            return toApiError(host, error)
          })
        )
      }).pipe(Effect.scoped, Effect.withSpan("AgentClient.writeArchive"))

    return AgentClient.of({
      api: client,
      call,
      files,
      exec,
      readFile,
      stats,
      writeFile,
      forkSnapshot,
      readArchive,
      writeArchive
    })
  })

  static readonly layer = Layer.effect(AgentClient, AgentClient.make).pipe(
    Layer.provide(NodeHttpClient.layerNodeHttpOptions({ keepAlive: true }))
  )
}
