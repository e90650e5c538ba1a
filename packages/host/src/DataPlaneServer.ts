/**
 * The data plane a host agent serves (`@svc/host-protocol/DataPlane` declares it): exec and
 * files of this host's sandboxes over HTTP, for the API processes only. Built with
 * `HttpApiBuilder` against that definition and served by `NodeHttpServer`, which interrupts a
 * request's work when its client goes away (a running exec or transfer is killed), tears down
 * bodies left unread and closes gracefully.
 *
 * - Every request needs `Authorization: Bearer <token>`; the token is random per start
 *   (published in the host record) and compared in constant time (equal-length digests).
 * - Bodies are capped: exec JSON 1 MiB, uploads 100 MiB; a declared `Content-Length` above the
 *   cap is refused before reading.
 * - Files stream both ways between the socket and the processes in the sandbox: no file is
 *   ever held whole. At most `maxTransfers` run at once; one more waits up to
 *   `transferWaitMs` for a slot, then is refused with 503 `busy` (retry). One org (the `org`
 *   the API names) holds at most `maxTransfersPerOrg` of them; one more is 429 `rate_limited`
 *   at once, so that an org's transfers never wait behind another org's. A transfer that moves
 *   no byte for `transferIdleMs` (a FIFO nobody writes or reads, a client that stalls) has its
 *   connection closed: its slot is freed and its processes in the sandbox end.
 * - A sandbox has at most `maxTunnelsPerSandbox` preview tunnels open at once (whatever number
 *   of API processes opened them); one more is 503 `busy`.
 * - Paths are checked by the driver, which resolves them inside the sandbox (links and `..`
 *   never leave its root).
 * - Whatever answers (a route, the router, the framework), an error has the definition's body
 *   `{error, reason, errno?}`; the details of a host failure go to this log only.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import {
  AgentApi,
  AgentAuthorization,
  AgentBadGateway,
  AgentBusy,
  AgentConflict,
  type AgentError,
  type AgentExecResult,
  AgentFailed,
  AgentInsufficientStorage,
  AgentInvalid,
  AgentNotFound,
  AgentNotRunning,
  AgentRateLimited,
  AgentRefused,
  type AgentSandboxStats,
  type AgentSpliceResult,
  AgentTooLarge,
  AgentUnauthorized,
  MAX_EXEC_BODY_BYTES,
  MAX_UPLOAD_BYTES
} from "@svc/host-protocol/DataPlane"
import { stopReading } from "@svc/host-protocol/Handoff"
import * as TransferIdle from "@svc/host-protocol/TransferIdle"
import * as TransferMemory from "@svc/host-protocol/TransferMemory"
import {
  ByteSize,
  Cause,
  Context,
  Effect,
  Exit,
  Layer,
  Redacted,
  Schema,
  Scope,
  Semaphore,
  Stream,
  type Types
} from "effect"
import {
  Headers,
  HttpIncomingMessage,
  HttpRouter,
  HttpServer,
  HttpServerError,
  HttpServerRequest,
  HttpServerResponse
} from "effect/http"
import { HttpApiBuilder, HttpApiError } from "effect/http-api"
import type * as Socket from "effect/socket/Socket"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import * as Http from "node:http"
import * as Net from "node:net"
import type { SandboxActivity } from "./Activity.ts"
import { FileHandlers } from "./DataPlaneServer/Files.ts"
import { ProcessHandlers } from "./DataPlaneServer/Processes.ts"
import {
  connectionOf,
  endConnection,
  forwardDrain,
  resetConnection,
  switchProtocols,
  wantsSplice,
  worthSplicing
} from "./DataPlaneServer/Splices.ts"
import { DriverExecRequest, SandboxDriver, type SandboxDriverError, type SplicedBody } from "./Driver.ts"

/** When the request names no timeout: an exec must not hold a connection for ever. */
export const DEFAULT_EXEC_TIMEOUT_MS = 300_000
/** How long a transfer beyond the host's bound waits for a slot before it is refused. */
export const DEFAULT_TRANSFER_WAIT_MS = 30_000
/** How long a transfer may move no byte before its connection is closed. */
export const DEFAULT_TRANSFER_IDLE_MS = 120_000
/** Preview tunnels one sandbox has open at once on this host, from every API process together. */
export const DEFAULT_MAX_TUNNELS_PER_SANDBOX = 1024
/** How long a preview tunnel waits for the sandbox's port to accept. */
const TUNNEL_CONNECT_TIMEOUT_MS = 5_000
/** A stop lets requests in progress run this long, then cuts their connections (their work ends). */
const STOP_GRACE_MS = 5_000

export interface DataPlaneSettings {
  /** 0 = any free port. */
  readonly port: number
  readonly listenHost: string
  /** File transfers streamed at once. */
  readonly maxTransfers: number
  /**
   * Of those, what one org holds at once; more are 429 at once. Below `maxTransfers`, one org
   * never holds every slot (at or above it, nothing stops one org from doing so).
   */
  readonly maxTransfersPerOrg: number
  readonly transferWaitMs?: number
  readonly transferIdleMs?: number
  /** Preview tunnels open at once per sandbox (each holds two descriptors here); more are 503 `busy`. */
  readonly maxTunnelsPerSandbox?: number
  readonly defaultExecTimeoutMs?: number
  /** Told of every call on a sandbox (its idleness, `Activity.ts`); absent: nobody listens. */
  readonly activity?: SandboxActivity["Service"]
}

const invalid = (error: string) => new AgentInvalid({ error })
const failed = (error: string) => new AgentFailed({ error })

/** What a driver refusal can become (a gateway error is the tunnel's own, 401 the middleware's). */
type DriverAgentError = Exclude<AgentError, AgentBadGateway | AgentUnauthorized | AgentConflict>

/** Driver refusals as data-plane errors. */
export const fromDriverError = (error: SandboxDriverError): DriverAgentError => {
  switch (error._tag) {
    case "InvalidSandboxRequest":
      return invalid(error.message)
    case "SandboxNotFound":
      return new AgentNotFound({ error: "no such sandbox on this host" })
    case "SandboxNotRunning":
      return new AgentNotRunning({ error: "the sandbox is not running" })
    case "SandboxFileError":
      switch (error.reason) {
        case "not_found":
          return new AgentNotFound({ error: `${error.path}: no such file or folder` })
        case "too_large":
          return new AgentTooLarge({ error: `${error.path}: ${error.message}` })
        case "no_space":
          // What the upload wrote is gone already (507).
          return new AgentInsufficientStorage({ error: `${error.path}: the sandbox's disk is full` })
        case "refused":
          return new AgentRefused({
            error: `${error.path}: ${error.message}`,
            ...(error.errno !== undefined ? { errno: error.errno } : {})
          })
        case "failed":
          return failed(`${error.path}: ${error.message}`)
        case "kernel_interface":
          return invalid(`${error.path}: paths under /proc and /sys are refused (exec reads them)`)
        default:
          return invalid(`${error.path}: ${error.reason.replaceAll("_", " ")}`)
      }
    case "SandboxAlreadyExists":
      return failed("the sandbox exists already")
    case "TemplateNotFound":
      return failed(`template ${error.template} not found`)
    case "ProcessRefused":
      // The processes endpoints answer these themselves (`DataPlaneServer/Processes.ts`: 404, 409).
      return error.reason === "not_found" ? new AgentNotFound({ error: error.message }) : failed(error.message)
    case "SandboxCapacityExhausted":
    case "DriverUnsupported":
      return failed(error.message)
    case "DriverFailure":
      // The details name host paths and commands: they go to the agent's log, not the caller.
      return failed(`${error.operation} failed on the host`)
  }
}

/** A driver call whose refusals become data-plane errors (host failures are logged here). */
export const viaDriver = <A, E extends SandboxDriverError, R>(
  effect: Effect.Effect<A, E | DriverAgentError, R>
): Effect.Effect<A, DriverAgentError, R> =>
  effect.pipe(
    Effect.tapError((error) =>
      error._tag === "DriverFailure"
        ? Effect.logError("agent: driver failure", { operation: error.operation, message: error.message })
        : Effect.void
    ),
    Effect.mapError((error) =>
      isAgentError(error) ? error as DriverAgentError : fromDriverError(error as SandboxDriverError)
    )
  )

/** An exec touches no file: a file refusal or a busy host cannot answer it (the driver failed). */
const execError = (
  error: DriverAgentError
): Exclude<DriverAgentError, AgentRefused | AgentBusy | AgentRateLimited | AgentInsufficientStorage> =>
  error instanceof AgentRefused || error instanceof AgentBusy || error instanceof AgentRateLimited ||
    error instanceof AgentInsufficientStorage
    ? failed(error.error)
    : error

/** Stats read cgroups and a link, no file: what else the driver says is the host failing. */
const statsError = (error: DriverAgentError): AgentInvalid | AgentNotFound | AgentNotRunning | AgentFailed =>
  error instanceof AgentInvalid || error instanceof AgentNotFound || error instanceof AgentNotRunning
    ? error
    : failed("the host could not read the sandbox's usage")

/** A fork's snapshot copies the writable layer on the host: what else the driver says is the host failing. */
const forkError = (error: DriverAgentError): AgentInvalid | AgentNotFound | AgentNotRunning | AgentFailed =>
  error instanceof AgentInvalid || error instanceof AgentNotFound || error instanceof AgentNotRunning
    ? error
    : failed("the host could not copy the sandbox's file system")

/** A tunnel opens a port, no file: what else the driver says is the host failing. */
const tunnelError = (error: DriverAgentError): AgentInvalid | AgentNotFound | AgentNotRunning | AgentFailed =>
  error instanceof AgentInvalid || error instanceof AgentNotFound || error instanceof AgentNotRunning
    ? error
    : failed("the host could not open the port")

/** A connection to the sandbox's port (closed with the scope), or 502 when nothing answers. */
const connectPort = (host: string, port: number) =>
  Effect.acquireRelease(
    Effect.callback<Net.Socket, AgentBadGateway>((resume) => {
      const upstream = Net.connect({ host, port })
      upstream.setTimeout(TUNNEL_CONNECT_TIMEOUT_MS)
      const refused = () => {
        upstream.destroy()
        resume(Effect.fail(new AgentBadGateway({ error: `nothing answers on port ${port} of the sandbox` })))
      }
      upstream.once("timeout", refused)
      upstream.once("error", refused)
      upstream.once("connect", () => {
        upstream.off("timeout", refused)
        upstream.off("error", refused)
        upstream.setTimeout(0)
        resume(Effect.succeed(upstream))
      })
      return Effect.sync(() => upstream.destroy())
    }),
    (upstream) => Effect.sync(() => upstream.destroy())
  )

/** Bytes one way, at the pace the other end takes them, until the reading side ends. */
const pump = (from: Socket.Socket, to: Socket.Socket) =>
  Effect.gen(function*() {
    const reader = yield* from.reader
    const writer = yield* to.writer
    while (true) yield* writer.writeAll(yield* reader.pull)
  })

const AGENT_ERRORS = [
  AgentInsufficientStorage,
  AgentInvalid,
  AgentUnauthorized,
  AgentNotFound,
  AgentNotRunning,
  AgentTooLarge,
  AgentRefused,
  AgentFailed,
  AgentBadGateway,
  AgentBusy,
  AgentRateLimited,
  AgentConflict
] as const

const isAgentError = (u: unknown): u is AgentError => AGENT_ERRORS.some((E) => u instanceof E)

/** A transfer's connection, closed once idle for `idleMs` (@svc/host-protocol/TransferIdle). */
const closeWhenIdle = (request: HttpServerRequest.HttpServerRequest, idleMs: number) =>
  TransferIdle.closeWhenIdle(
    NodeHttpServerRequest.toIncomingMessage(request).socket,
    idleMs,
    Effect.logInfo("agent: file transfer idle, connection closed", { url: request.url, idleMs })
  )

/** The definition's error body `{error, reason, errno?}` and its status. */
export const errorBody = (error: AgentError) => ({
  status: (error.constructor as unknown as { readonly status: number }).status,
  body: {
    error: error.error,
    reason: error.reason,
    ...("errno" in error && error.errno !== undefined ? { errno: error.errno } : {})
  }
})

/** The definition's error body, for answers given outside an endpoint. */
const errorResponse = (error: AgentError) => {
  const { body, status } = errorBody(error)
  return HttpServerResponse.jsonUnsafe(body, { status })
}

const tooLarge = (max: number) => new AgentTooLarge({ error: `body larger than ${max} bytes` })
const unauthorized = new AgentUnauthorized({ error: "missing or wrong bearer token" })

const digest = (text: string) => createHash("sha256").update(text, "utf8").digest()

/** The routes of the definition, for the answers the router gives (405 against 404). */
const ROUTE = /^\/sandboxes\/([^/]+)\/(exec|files|files\/archive)$/

const decodable = (segment: string) => {
  try {
    decodeURIComponent(segment)
    return true
  } catch {
    return false
  }
}

const pathOf = (url: string) => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

/**
 * What the router and the framework answer outside the endpoints, as the definition's errors:
 * an unknown route (401 without the token, as every route; 405 for a known path with another
 * method; else 404), a body that cannot be read or decoded (400), one over its cap (413), and
 * anything unexpected (500, the details logged here).
 */
const renderCause = (
  cause: Cause.Cause<unknown>,
  request: HttpServerRequest.HttpServerRequest,
  authorized: (header: string | undefined) => boolean
): Effect.Effect<HttpServerResponse.HttpServerResponse> => {
  for (const reason of cause.reasons) {
    const value = Cause.isFailReason(reason) ? reason.error : Cause.isDieReason(reason) ? reason.defect : undefined
    if (isAgentError(value)) return Effect.succeed(errorResponse(value))
    if (HttpServerError.isHttpServerError(value)) {
      const r = value.reason
      if (r._tag === "RouteNotFound") {
        if (!authorized(request.headers["authorization"])) return Effect.succeed(errorResponse(unauthorized))
        const route = ROUTE.exec(pathOf(request.url))
        if (route === null) return Effect.succeed(errorResponse(new AgentNotFound({ error: "no such route" })))
        const [, id, what] = route
        if (!decodable(id!)) return Effect.succeed(errorResponse(invalid("sandbox id is not valid percent-encoding")))
        const allowed = what === "exec" ? ["POST"] : ["GET", "PUT"]
        // The router found no route for a known path and method: its id is not one (`%2F`).
        if (allowed.includes(request.method)) return Effect.succeed(errorResponse(invalid("invalid sandbox id")))
        return Effect.succeed(
          HttpServerResponse.jsonUnsafe({ error: `use ${allowed.join(" or ")}`, reason: "invalid" }, { status: 405 })
        )
      }
      if (r._tag === "RequestParseError") {
        return Effect.succeed(errorResponse(
          r.reason === "BodyTooLarge" ? tooLarge(MAX_EXEC_BODY_BYTES) : invalid("the request body could not be read")
        ))
      }
    }
    if (HttpApiError.HttpApiSchemaError.is(value) && value.kind !== "Body" && value.kind !== "ResponseHeaders") {
      const where = value.kind === "Payload" ? "body" : value.kind.toLowerCase()
      const detail = Schema.isSchemaError(value.cause) ? value.cause.message : String(value.cause)
      return Effect.succeed(errorResponse(invalid(`invalid request ${where}: ${detail}`)))
    }
    if (HttpApiError.HttpApiPayloadTooLarge.is(value)) {
      return Effect.succeed(errorResponse(tooLarge(MAX_UPLOAD_BYTES)))
    }
  }
  // The client went away or the agent stops: nobody reads this answer.
  if (Cause.hasInterruptsOnly(cause)) return Effect.succeed(errorResponse(failed("interrupted")))
  return Effect.as(
    Effect.logError("agent: data plane request failed", { cause: Cause.pretty(cause) }),
    errorResponse(failed("internal error"))
  )
}

/** The definition's body for an error answer the framework gave without one (its 413, 415). */
const definedShape = (response: HttpServerResponse.HttpServerResponse, url: string) => {
  if (response.status < 400) return response
  const type = response.headers["content-type"] ?? ("contentType" in response.body ? response.body.contentType : "")
  if (type?.includes("json")) return response
  const error = response.status === 413
    ? tooLarge(pathOf(url).endsWith("/exec") ? MAX_EXEC_BODY_BYTES : MAX_UPLOAD_BYTES)
    : response.status === 401
    ? unauthorized
    : response.status === 404
    ? new AgentNotFound({ error: "no such route" })
    : response.status < 500
    ? invalid(`refused with ${response.status}`)
    : failed("internal error")
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(response.headers)) {
    if (name !== "content-type" && name !== "content-length") headers[name] = value
  }
  return HttpServerResponse.jsonUnsafe(
    { error: error.error, reason: error.reason },
    { status: response.status, headers }
  )
}

/**
 * Before the routes: the data plane takes any `Content-Type` (an exec body is JSON, an upload
 * raw bytes, whatever the client called them), an exec body declaring more than the cap is
 * refused before reading, and bodies read whole stop at the exec cap.
 */
const makeMiddleware = (authorized: (header: string | undefined) => boolean) =>
  HttpRouter.middleware<{ handles: unknown }>()(
    Effect.succeed(
      (
        httpEffect: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, HttpServerRequest.HttpServerRequest>
      ): Effect.Effect<HttpServerResponse.HttpServerResponse, Types.unhandled, HttpServerRequest.HttpServerRequest> =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const route = ROUTE.exec(pathOf(request.url))
          const contentType = route === null
            ? undefined
            : request.method === "POST" && route[2] === "exec"
            ? "application/json"
            : request.method === "PUT" && (route[2] === "files" || route[2] === "files/archive")
            ? "application/octet-stream"
            : undefined
          if (
            contentType === "application/json" &&
            Number(request.headers["content-length"]) > MAX_EXEC_BODY_BYTES &&
            authorized(request.headers["authorization"])
          ) {
            return errorResponse(tooLarge(MAX_EXEC_BODY_BYTES))
          }
          const seen = contentType === undefined
            ? request
            : request.modify({ headers: Headers.set(request.headers, "content-type", contentType) })
          const response = yield* httpEffect.pipe(
            Effect.provideService(HttpServerRequest.HttpServerRequest, seen),
            Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(MAX_EXEC_BODY_BYTES)),
            Effect.catchCause((cause) => renderCause(cause, request, authorized))
          )
          return definedShape(response, request.url)
        })
    ),
    { global: true }
  )

/** An upload's body: unreadable or cut short (the client went away) is `invalid`, never an upload. */
const uploadBody = <E>(request: HttpServerRequest.HttpServerRequest, payload: Stream.Stream<Uint8Array, E>) => {
  const source = NodeHttpServerRequest.toIncomingMessage(request)
  return payload.pipe(
    Stream.mapError((e) =>
      HttpApiError.HttpApiPayloadTooLarge.is(e)
        ? tooLarge(MAX_UPLOAD_BYTES)
        : invalid("the request body could not be read")
    ),
    Stream.concat(Stream.fromEffectDrain(
      Effect.suspend(() =>
        "complete" in source && !source.complete
          ? Effect.fail(invalid("the request body was cut short"))
          : Effect.void
      )
    ))
  )
}

/** The endpoints over the driver. */
const handlers = (settings: DataPlaneSettings) =>
  HttpApiBuilder.group(
    AgentApi,
    "sandboxes",
    Effect.fn(function*(handlers) {
      const driver = yield* SandboxDriver
      const transfers = yield* Semaphore.make(settings.maxTransfers)
      const perOrg = settings.maxTransfersPerOrg
      /** Transfers each org holds now (an org holding none has no entry). */
      const held = new Map<string, number>()
      const transferWaitMs = settings.transferWaitMs ?? DEFAULT_TRANSFER_WAIT_MS
      const transferIdleMs = settings.transferIdleMs ?? DEFAULT_TRANSFER_IDLE_MS
      const maxTunnels = settings.maxTunnelsPerSandbox ?? DEFAULT_MAX_TUNNELS_PER_SANDBOX
      /** Tunnels each sandbox has open now (none: no entry). */
      const tunnels = new Map<string, number>()

      /** One of the sandbox's tunnels until the tunnel's scope closes, or 503 `busy`. */
      const tunnelSlot = (sandboxId: string) =>
        Effect.acquireRelease(
          Effect.suspend(() => {
            const n = tunnels.get(sandboxId) ?? 0
            if (n >= maxTunnels) {
              return Effect.fail(new AgentBusy({ error: `the sandbox has ${maxTunnels} tunnels open on this host` }))
            }
            tunnels.set(sandboxId, n + 1)
            return Effect.void
          }),
          () =>
            Effect.sync(() => {
              const n = (tunnels.get(sandboxId) ?? 1) - 1
              if (n === 0) tunnels.delete(sandboxId)
              else tunnels.set(sandboxId, n)
            })
        )
      const defaultTimeout = settings.defaultExecTimeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS
      const decodeDriverExec = Schema.decodeUnknownEffect(DriverExecRequest)

      /** One of the org's own slots until the response is sent, or 429 at once when it holds them all. */
      const orgSlot = (org: string) =>
        Effect.acquireRelease(
          Effect.suspend(() => {
            const n = held.get(org) ?? 0
            if (n >= perOrg) {
              return Effect.fail(
                new AgentRateLimited({ error: `the org runs ${perOrg} file transfers on this host, as many as it may` })
              )
            }
            held.set(org, n + 1)
            return Effect.void
          }),
          () =>
            Effect.sync(() => {
              const n = (held.get(org) ?? 1) - 1
              if (n === 0) held.delete(org)
              else held.set(org, n)
            })
        )

      /**
       * Bytes through this process until the request's scope closes (sent, failed or the client
       * gone): in flight for the collections (TransferMemory.ts), and the connection closed once
       * the transfer idles. Not for a spliced transfer's bytes, which pass neither this process's
       * memory nor its sockets' counters (the splice keeps its own idle bound).
       */
      const throughThisProcess = (request: HttpServerRequest.HttpServerRequest) =>
        Effect.andThen(TransferMemory.inFlight, closeWhenIdle(request, transferIdleMs))

      /**
       * The org's slot (a request naming no org counts as its sandbox's), then one of the
       * host's until the response is sent (the request's scope), or 503 `busy` after the wait;
       * then, unless it asked to be spliced (its route decides once it knows), `throughThisProcess`.
       * The release frees both slots earlier: a spliced transfer's, once its bytes are through and
       * before the API hears of its end (which it would otherwise see before this host let go,
       * and its next transfer be refused).
       */
      const releasableSlot = (
        request: HttpServerRequest.HttpServerRequest,
        sandboxId: string,
        org: string | undefined
      ): Effect.Effect<Effect.Effect<void>, AgentBusy | AgentRateLimited, Scope.Scope> =>
        Effect.gen(function*() {
          if (wantsSplice(request)) forwardDrain(connectionOf(request))
          const slots = yield* Scope.fork(yield* Effect.scope)
          const held = Effect.gen(function*() {
            yield* orgSlot(org !== undefined ? `org:${org}` : `sandbox:${sandboxId}`)
            const slot = yield* transfers.takeScoped(1).pipe(Effect.timeoutOption(transferWaitMs))
            if (slot._tag === "None") {
              return yield* new AgentBusy({ error: "the host runs as many file transfers as it allows; retry" })
            }
          })
          yield* Scope.provide(slots)(held)
          if (!wantsSplice(request)) yield* throughThisProcess(request)
          return Scope.close(slots, Exit.void)
        })
      /** `releasableSlot` held until the response is sent. */
      const transferSlot = (request: HttpServerRequest.HttpServerRequest, sandboxId: string, org: string | undefined) =>
        Effect.asVoid(releasableSlot(request, sandboxId, org))

      return handlers
        .handle("exec", ({ params, payload }) =>
          Effect.gen(function*() {
            const request = yield* decodeDriverExec({
              cmd: payload.cmd,
              ...(payload.cwd !== undefined ? { cwd: payload.cwd } : {}),
              ...(payload.env !== undefined ? { env: payload.env } : {}),
              ...(payload.stdin !== undefined ? { stdin: payload.stdin } : {}),
              timeoutMs: payload.timeout_ms ?? defaultTimeout
            }).pipe(Effect.mapError((e) => invalid(e.message)))
            const result = yield* viaDriver(driver.exec(params.id, request)).pipe(Effect.mapError(execError))
            return {
              exit_code: result.exitCode,
              stdout: Buffer.from(result.stdout).toString("utf8"),
              stderr: Buffer.from(result.stderr).toString("utf8"),
              duration_ms: result.durationMs,
              truncated: result.stdoutTruncated || result.stderrTruncated
            } satisfies AgentExecResult
          }))
        .handle("forkSnapshot", ({ params, payload }) =>
          viaDriver(driver.snapshotLayer(params.id, payload.layer)).pipe(Effect.mapError(forkError)))
        .handle("stats", ({ params }) =>
          Effect.map(
            viaDriver(driver.stats(params.id)).pipe(Effect.mapError(statsError)),
            (stats): AgentSandboxStats => ({
              cpu_usage_ns: stats.cpuUsageNs ?? null,
              memory_bytes: stats.memoryBytes,
              pids: stats.pids,
              net_bytes_in: stats.netBytesIn ?? null,
              net_bytes_out: stats.netBytesOut ?? null
            })
          ))
        .handle("readFile", ({ params, query, request }) =>
          Effect.gen(function*() {
            const release = yield* releasableSlot(request, params.id, query.org)
            const file = yield* viaDriver(
              driver.readFileStream(params.id, query.path, { maxBytes: MAX_UPLOAD_BYTES }).pipe(
                Effect.catchTag("SandboxFileError", (e) =>
                  e.reason === "is_directory"
                    ? Effect.map(driver.listDir(params.id, query.path), (entries) => ({
                      entries: entries.map(({ mtime, name, size, type }) => ({ name, type, size, mtime }))
                    }))
                    : Effect.fail(e))
              )
            )
            if ("entries" in file) {
              return file
            }
            if (wantsSplice(request) && worthSplicing(file.size) && file.spliceTo !== undefined) {
              const socket = connectionOf(request)
              switchProtocols(socket, file.size)
              const sent = yield* Effect.result(file.spliceTo(socket, transferIdleMs))
              yield* release
              if (sent._tag === "Failure") {
                yield* Effect.logWarning("agent: spliced file read cut", {
                  error: sent.failure._tag,
                  message: sent.failure.message
                })
                yield* resetConnection(socket)
              } else {
                yield* endConnection(socket, transferIdleMs)
              }
              // Never written: the connection is closed, the framework sends nothing on it.
              return HttpServerResponse.empty()
            }
            // Asked spliced, answered plainly (a small file): its bytes pass here after all.
            if (wantsSplice(request)) {
              yield* throughThisProcess(request)
            }
            // Piped from the sandbox's pipe to the socket, no effect per chunk. A failure midway
            // cuts the connection (the client sees a short body, never an end).
            const services: Context.Context<never> = yield* Effect.context<never>()
            file.readable.once("error", (error: { readonly _tag?: string; readonly message?: string }) => {
              Effect.runForkWith(services)(
                Effect.logWarning("agent: file stream cut", { error: error._tag, message: error.message })
              )
            })
            return HttpServerResponse.raw(file.readable, {
              contentType: "application/octet-stream",
              ...(file.size !== null ? { contentLength: file.size } : {})
            })
          }))
        .handle("writeFile", ({ params, query, request }) =>
          Effect.gen(function*() {
            const release = yield* releasableSlot(request, params.id, query.org)
            if (query.mode !== undefined && !/^0?[0-7]{3,4}$/.test(query.mode)) {
              return yield* invalid(`mode ${query.mode} is not an octal mode such as 0644`)
            }
            const options = {
              maxBytes: MAX_UPLOAD_BYTES,
              mode: query.mode !== undefined ? parseInt(query.mode, 8) : 0o644,
              parents: query.parents !== "false"
            }
            if (wantsSplice(request)) {
              const socket = connectionOf(request)
              let switched = false
              const body: SplicedBody<AgentInvalid> = {
                socket,
                idleMs: transferIdleMs,
                begin: Effect.sync(() => {
                  switched = true
                  switchProtocols(socket)
                  return stopReading(socket)
                }),
                cut: () =>
                  invalid("the request body was cut short")
              }
              const written = yield* Effect.result(
                viaDriver(driver.writeFileStream<AgentInvalid, never>(params.id, query.path, body, options))
              )
              yield* release
              // Refused before the 101: answered as the plain route answers.
              if (!switched) {
                return yield* (written._tag === "Success" ? Effect.void : Effect.fail(written.failure))
              }
              yield* endConnection(
                socket,
                transferIdleMs,
                JSON.stringify(
                  written._tag === "Success" ? { status: 204 } satisfies AgentSpliceResult : errorBody(written.failure)
                )
              )
              return HttpServerResponse.empty()
            }
            // The request piped into the sandbox, no effect per chunk (the payload stream is not read).
            const body = {
              readable: NodeHttpServerRequest.toIncomingMessage(request),
              cut: () =>
                invalid("the request body was cut short")
            }
            yield* viaDriver(driver.writeFileStream<AgentInvalid, never>(params.id, query.path, body, options))
          }))
        .handle("readArchive", ({ params, query, request }) =>
          Effect.gen(function*() {
            yield* transferSlot(request, params.id, query.org)
            const archive = yield* viaDriver(driver.readArchive(params.id, query.path, query.format))
            // A failure midway cuts the connection (the client sees a short body, never an end).
            const stream = archive.stream.pipe(
              Stream.tapError((error) =>
                Effect.logWarning("agent: archive stream cut", { error: error._tag, message: error.message })
              )
            )
            return HttpServerResponse.stream(stream, {
              contentType: query.format === "tar.gz" ? "application/gzip" : "application/x-tar"
            })
          }))
        .handle("writeArchive", ({ params, payload, query, request }) =>
          Effect.gen(function*() {
            yield* transferSlot(request, params.id, query.org)
            yield* viaDriver(driver.writeArchive(params.id, query.path, uploadBody(request, payload), query.format))
          }))
        .handle("tunnel", ({ params, upgrade }) =>
          Effect.gen(function*() {
            if (!/^\d{1,5}$/.test(params.port)) {
              return yield* invalid(`${params.port} is not a port`)
            }
            const address = yield* viaDriver(driver.portAddress(params.id, Number(params.port))).pipe(
              Effect.mapError(tunnelError)
            )
            yield* tunnelSlot(params.id)
            // Connected first, 101 after: a client never gets a tunnel to nothing.
            const upstream = yield* connectPort(address.host, address.port)
            const client = yield* upgrade()
            const sandbox = yield* NodeSocket.fromDuplex(Effect.succeed(upstream))
            // Either side ending ends the tunnel (the scope closes both connections).
            yield* Effect.raceFirst(pump(client, sandbox), pump(sandbox, client)).pipe(Effect.ignore)
          }).pipe(Effect.scoped))
    })
  )

/**
 * The sandbox an authorized request works in (`/sandboxes/{id}/...`), or undefined: its stats
 * are not activity (reading about a sandbox is not using it).
 */
export const activitySandbox = (url: string | undefined): string | undefined => {
  const match = url === undefined ? null : /^\/sandboxes\/([A-Za-z0-9_-]{1,128})(\/[^?]*)?(?:\?|$)/.exec(url)
  if (match === null || match[2] === "/stats") return undefined
  return match[1]
}

/**
 * Every authorized call on a sandbox is activity, in progress until its response (or its
 * upgraded connection: a terminal, a preview's tunnel) closes.
 */
const watchActivity = (
  server: Http.Server,
  activity: SandboxActivity["Service"],
  authorized: (header: string | undefined) => boolean
) => {
  const track = (request: Http.IncomingMessage, closed: { once(event: "close", f: () => void): unknown }) => {
    const id = activitySandbox(request.url)
    if (id === undefined || !authorized(request.headers.authorization)) return
    closed.once("close", activity.begin(id))
  }
  server.on("request", (request: Http.IncomingMessage, response: Http.ServerResponse) => track(request, response))
  server.on("upgrade", (request: Http.IncomingMessage, socket: Net.Socket) => track(request, socket))
}

/** The bearer check: the token's digest against the request's, in constant time. */
const checker = (token: string) => {
  const tokenDigest = digest(token)
  // Digests have equal lengths: the comparison takes the same time whatever was sent.
  return (credential: string) => timingSafeEqual(digest(credential), tokenDigest) && credential !== ""
}

/** The `Authorization` header as the security scheme reads it (`Bearer <token>`, any case). */
const bearerOf = (header: string | undefined) => {
  const match = header === undefined ? null : /^bearer +(\S.*)$/i.exec(header)
  return match?.[1] ?? ""
}

export class DataPlaneServer extends Context.Service<DataPlaneServer, {
  /** The port it listens on (the one asked for, or the one the system gave for 0). */
  readonly port: number
  /** The bearer token every request needs; random per start. */
  readonly token: string
}>()("@svc/host/DataPlaneServer") {
  /** Listens once every route can answer; a stop lets requests in progress finish for 5 s. */
  static readonly layer = (
    settings: DataPlaneSettings
  ): Layer.Layer<DataPlaneServer, HttpServerError.ServeError, SandboxDriver> =>
    Layer.effect(
      DataPlaneServer,
      Effect.gen(function*() {
        // Transfers pass through this process (TransferMemory.ts).
        yield* TransferMemory.accountExternalMemoryInHeapLimit
        const token = randomBytes(32).toString("base64url")
        const matches = checker(token)
        const authorized = (header: string | undefined) => matches(bearerOf(header))
        const authorization = Layer.succeed(
          AgentAuthorization,
          AgentAuthorization.of({
            bearer: (httpEffect, { credential }) =>
              matches(Redacted.value(credential)) ? httpEffect : Effect.fail(unauthorized)
          })
        )
        const routes = Layer.mergeAll(
          HttpApiBuilder.layer(AgentApi).pipe(
            Layer.provide(handlers(settings)),
            Layer.provide(ProcessHandlers(settings)),
            Layer.provide(FileHandlers),
            Layer.provide(authorization)
          ),
          makeMiddleware(authorized)
        )
        // The routes and their services first, the port after: nothing is accepted that
        // could not be answered.
        const app = yield* HttpRouter.toHttpEffect(routes)
        const server = Http.createServer({ keepAliveTimeout: 30_000 })
        if (settings.activity !== undefined) watchActivity(server, settings.activity, authorized)
        const context = yield* Layer.build(
          HttpServer.serve(app).pipe(
            Layer.provideMerge(NodeHttpServer.layerServer(() => server, {
              port: settings.port,
              host: settings.listenHost,
              gracefulShutdownTimeout: STOP_GRACE_MS
            }))
          )
        )
        // Released before the server: once the grace is over, connections still open are cut,
        // which interrupts their work (a close would otherwise wait for them).
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            server.closeIdleConnections()
            setTimeout(() => server.closeAllConnections(), STOP_GRACE_MS).unref()
          })
        )
        const address = Context.get(context, HttpServer.HttpServer).address
        const port = address._tag === "UnixPathAddress" ? 0 : address.port
        return DataPlaneServer.of({ port, token })
      })
    ).pipe(Layer.provide(NodeHttpServer.layerHttpServices))
}
