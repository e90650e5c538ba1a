/**
 * The agent's data plane: exec and files of this host's sandboxes over HTTP (routes and errors
 * of `Protocol.ts`), for the API processes only. Plain `node:http`: it sits on the hot path of
 * every exec and file request, so it does no more than check, call the driver and answer.
 *
 * - Every request needs `Authorization: Bearer <token>`; the token is random per agent start
 *   (published in the host record) and compared in constant time (equal-length digests).
 * - Bodies are capped: exec JSON 1 MiB, uploads 100 MiB (a declared `Content-Length` above
 *   the cap is refused before reading).
 * - Files stream both ways between the socket and the processes in the sandbox: no file is
 *   ever held whole. At most `maxTransfers` run at once; one more waits up to
 *   `transferWaitMs` for a slot, then is refused with 503 `busy` (retry).
 * - Paths are checked by the driver, which resolves them inside the sandbox (links and `..`
 *   never leave its root).
 * - A client that goes away interrupts its request: a running exec or transfer is killed.
 */
import * as NodeStream from "@effect/platform-node/NodeStream"
import { writeChunk } from "@svc/host-protocol/Backpressure"
import { type AgentError, AgentExecRequest, type AgentExecResult } from "@svc/host-protocol/Protocol"
import {
  type DirEntry,
  DriverExecRequest,
  type FileStream,
  MAX_FILE_BYTES,
  SandboxDriver,
  type SandboxDriverError
} from "@svc/host/Driver"
import { handleTunnel } from "@svc/host/PortTunnel"
import { Context, Effect, FiberSet, Layer, Schema, type Scope, Semaphore, Stream } from "effect"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { AgentConfig } from "./Config.ts"

export const MAX_EXEC_BODY_BYTES = 1024 * 1024
/** When the request names no timeout: an exec must not hold a connection for ever. */
export const DEFAULT_EXEC_TIMEOUT_MS = 300_000
const STOP_GRACE_MS = 5_000
/** How long a transfer beyond the host's bound waits for a slot before it is refused. */
export const DEFAULT_TRANSFER_WAIT_MS = 30_000

export interface DataPlaneOptions {
  readonly maxExecBodyBytes?: number
  readonly maxUploadBytes?: number
  readonly defaultExecTimeoutMs?: number
  /** Default `AgentConfig.maxTransfers`. */
  readonly maxTransfers?: number
  readonly transferWaitMs?: number
}

class HttpFailure extends Schema.TaggedError<HttpFailure>()("HttpFailure", {
  status: Schema.Number,
  reason: Schema.Literals([
    "invalid",
    "unauthorized",
    "not_found",
    "not_running",
    "too_large",
    "refused",
    "busy",
    "failed"
  ]),
  message: Schema.String,
  errno: Schema.optionalKey(Schema.String)
}) {}

const invalid = (message: string) => new HttpFailure({ status: 400, reason: "invalid", message })

/** Driver refusals as data-plane errors. */
export const fromDriverError = (error: SandboxDriverError): HttpFailure => {
  switch (error._tag) {
    case "InvalidSandboxRequest":
      return invalid(error.message)
    case "SandboxNotFound":
      return new HttpFailure({ status: 404, reason: "not_found", message: "no such sandbox on this host" })
    case "SandboxNotRunning":
      return new HttpFailure({ status: 409, reason: "not_running", message: "the sandbox is not running" })
    case "SandboxFileError":
      switch (error.reason) {
        case "not_found":
          return new HttpFailure({ status: 404, reason: "not_found", message: `${error.path}: no such file or folder` })
        case "too_large":
          return new HttpFailure({ status: 413, reason: "too_large", message: `${error.path}: ${error.message}` })
        case "refused":
          return new HttpFailure({
            status: 422,
            reason: "refused",
            message: `${error.path}: ${error.message}`,
            ...(error.errno !== undefined ? { errno: error.errno } : {})
          })
        case "failed":
          return new HttpFailure({ status: 500, reason: "failed", message: `${error.path}: ${error.message}` })
        default:
          return invalid(`${error.path}: ${error.reason.replaceAll("_", " ")}`)
      }
    case "SandboxAlreadyExists":
      return new HttpFailure({ status: 500, reason: "failed", message: "the sandbox exists already" })
    case "TemplateNotFound":
      return new HttpFailure({ status: 500, reason: "failed", message: `template ${error.template} not found` })
    case "SandboxCapacityExhausted":
    case "DriverUnsupported":
      return new HttpFailure({ status: 500, reason: "failed", message: error.message })
    case "DriverFailure":
      // The details name host paths and commands: they go to the agent's log, not the caller.
      return new HttpFailure({ status: 500, reason: "failed", message: `${error.operation} failed on the host` })
  }
}

/** A driver call whose refusals become data-plane errors (host failures are logged here). */
const viaDriver = <A, R>(
  effect: Effect.Effect<A, SandboxDriverError | HttpFailure, R>
): Effect.Effect<A, HttpFailure, R> =>
  effect.pipe(
    Effect.tapError((error) =>
      error._tag === "DriverFailure"
        ? Effect.logError("agent: driver failure", { operation: error.operation, message: error.message })
        : Effect.void
    ),
    Effect.mapError((error) => (error._tag === "HttpFailure" ? error : fromDriverError(error)))
  )

/** Writes a file's stream to the response with backpressure; a failure midway cuts the connection. */
const sendStream = (res: Http.ServerResponse, stream: FileStream["stream"]) =>
  stream.pipe(
    Stream.runForEach((chunk) => writeChunk(res, chunk)),
    Effect.matchEffect({
      onSuccess: () => Effect.sync(() => void res.end()),
      onFailure: (error) =>
        Effect.andThen(
          Effect.logWarning("agent: file stream cut", { error: error._tag, message: error.message }),
          Effect.sync(() => res.destroy())
        )
    })
  )

const digest = (text: string) => createHash("sha256").update(text, "utf8").digest()

const ROUTE = /^\/sandboxes\/([^/]+)\/(exec|files)$/

/** Reads a body up to `max` bytes; more is a 413 (and the rest is discarded). */
const readBody = (req: Http.IncomingMessage, max: number) =>
  Effect.callback<Uint8Array, HttpFailure>((resume) => {
    const declared = Number(req.headers["content-length"])
    const tooLarge = () =>
      new HttpFailure({ status: 413, reason: "too_large", message: `body larger than ${max} bytes` })
    if (Number.isFinite(declared) && declared > max) {
      resume(Effect.fail(tooLarge()))
      return
    }
    const chunks: Array<Buffer> = []
    let size = 0
    let done = false
    const finish = (result: Effect.Effect<Uint8Array, HttpFailure>) => {
      if (done) return
      done = true
      req.off("data", onData)
      req.off("end", onEnd)
      req.off("error", onError)
      resume(result)
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size > max) {
        chunks.length = 0
        finish(Effect.fail(tooLarge()))
        return
      }
      chunks.push(chunk)
    }
    const onEnd = () => finish(Effect.succeed(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)))
    const onError = (e: Error) => finish(Effect.fail(invalid(`request body: ${e.message}`)))
    req.on("data", onData)
    req.on("end", onEnd)
    req.on("error", onError)
  })

const decodeExec = Schema.decodeUnknownEffect(AgentExecRequest)
const decodeDriverExec = Schema.decodeUnknownEffect(DriverExecRequest)

export class DataPlane extends Context.Service<DataPlane, {
  /** Base URL for other processes, e.g. `http://127.0.0.1:43127`. */
  readonly endpoint: string
  readonly token: string
  readonly port: number
}>()("@svc/agent/DataPlane") {
  static readonly layerWith = (options: DataPlaneOptions = {}) =>
    Layer.effect(
      DataPlane,
      Effect.gen(function*() {
        const config = yield* AgentConfig
        const driver = yield* SandboxDriver
        const maxExec = options.maxExecBodyBytes ?? MAX_EXEC_BODY_BYTES
        const maxUpload = options.maxUploadBytes ?? MAX_FILE_BYTES
        const defaultTimeout = options.defaultExecTimeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS
        const transfers = yield* Semaphore.make(options.maxTransfers ?? config.maxTransfers)
        const transferWaitMs = options.transferWaitMs ?? DEFAULT_TRANSFER_WAIT_MS
        const token = randomBytes(32).toString("base64url")
        const tokenDigest = digest(token)

        const authorized = (header: string | undefined) => {
          const match = header === undefined ? null : /^Bearer ([^\s]+)$/i.exec(header)
          // Digests have equal lengths: the comparison takes the same time whatever was sent.
          return timingSafeEqual(digest(match?.[1] ?? ""), tokenDigest) && match !== null
        }

        const exec = (sandboxId: string, req: Http.IncomingMessage) =>
          Effect.gen(function*() {
            const body = yield* readBody(req, maxExec)
            let json: unknown
            try {
              json = JSON.parse(Buffer.from(body).toString("utf8"))
            } catch {
              return yield* invalid("body is not JSON")
            }
            const request = yield* decodeExec(json).pipe(Effect.mapError((e) => invalid(e.message)))
            const execRequest = yield* decodeDriverExec({
              cmd: request.cmd,
              ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
              ...(request.env !== undefined ? { env: request.env } : {}),
              ...(request.stdin !== undefined ? { stdin: request.stdin } : {}),
              timeoutMs: request.timeout_ms ?? defaultTimeout
            }).pipe(Effect.mapError((e) => invalid(e.message)))
            const result = yield* viaDriver(driver.exec(sandboxId, execRequest))
            const answer: AgentExecResult = {
              exit_code: result.exitCode,
              stdout: Buffer.from(result.stdout).toString("utf8"),
              stderr: Buffer.from(result.stderr).toString("utf8"),
              duration_ms: result.durationMs,
              truncated: result.stdoutTruncated || result.stderrTruncated
            }
            return { status: 200, json: answer }
          })

        /** A transfer slot for the rest of the request (its scope), or 503 `busy` after the wait. */
        const transferSlot = Effect.gen(function*() {
          const slot = yield* transfers.takeScoped(1).pipe(Effect.timeoutOption(transferWaitMs))
          if (slot._tag === "None") {
            return yield* new HttpFailure({
              status: 503,
              reason: "busy",
              message: "the host runs as many file transfers as it allows; retry"
            })
          }
        })

        const getFile = (sandboxId: string, path: string) =>
          Effect.andThen(
            transferSlot,
            viaDriver(
              driver.readFileStream(sandboxId, path).pipe(
                Effect.map((file): Answer => ({ status: 200, file })),
                Effect.catchTag("SandboxFileError", (e) =>
                  e.reason === "is_directory"
                    ? Effect.map(driver.listDir(sandboxId, path), (entries: ReadonlyArray<DirEntry>): Answer => ({
                      status: 200,
                      json: { entries: entries.map(({ name, type, size, mtime }) => ({ name, type, size, mtime })) }
                    }))
                    : Effect.fail(e))
              )
            )
          )

        const putFile = (sandboxId: string, path: string, req: Http.IncomingMessage) =>
          Effect.gen(function*() {
            const declared = Number(req.headers["content-length"])
            if (Number.isFinite(declared) && declared > maxUpload) {
              return yield* new HttpFailure({
                status: 413,
                reason: "too_large",
                message: `body larger than ${maxUpload} bytes`
              })
            }
            yield* transferSlot
            const body = NodeStream.fromReadable<Uint8Array, HttpFailure>({
              evaluate: () => req,
              onError: (e) => invalid(`request body: ${e instanceof Error ? e.message : String(e)}`),
              // Destroying the request would close the socket the answer goes out on.
              closeOnDone: false
            }).pipe(
              // A body that ends without all its bytes (the client went away) is not an upload.
              Stream.concat(Stream.fromEffectDrain(
                Effect.suspend(() =>
                  req.complete ? Effect.void : Effect.fail(invalid("the request body was cut short"))
                )
              ))
            )
            yield* viaDriver(driver.writeFileStream(sandboxId, path, body, { maxBytes: maxUpload }))
            return { status: 204 } satisfies Answer as Answer
          })

        type Answer = { status: number; json?: unknown; file?: FileStream }

        const route = (req: Http.IncomingMessage): Effect.Effect<Answer, HttpFailure, Scope.Scope> => {
          if (!authorized(req.headers.authorization)) {
            return Effect.fail(
              new HttpFailure({ status: 401, reason: "unauthorized", message: "missing or wrong bearer token" })
            )
          }
          const url = new URL(req.url ?? "/", "http://agent")
          const match = ROUTE.exec(url.pathname)
          if (match === null) {
            return Effect.fail(new HttpFailure({ status: 404, reason: "not_found", message: "no such route" }))
          }
          let sandboxId: string
          try {
            sandboxId = decodeURIComponent(match[1]!)
          } catch {
            return Effect.fail(invalid("sandbox id is not valid percent-encoding"))
          }
          const method = req.method ?? "GET"
          if (match[2] === "exec") {
            if (method !== "POST") {
              return Effect.fail(new HttpFailure({ status: 405, reason: "invalid", message: "use POST" }))
            }
            return exec(sandboxId, req)
          }
          const path = url.searchParams.get("path")
          if (path === null) return Effect.fail(invalid("the path query parameter is required"))
          if (method === "GET") return getFile(sandboxId, path)
          if (method === "PUT") return putFile(sandboxId, path, req)
          return Effect.fail(new HttpFailure({ status: 405, reason: "invalid", message: "use GET or PUT" }))
        }

        const send = (req: Http.IncomingMessage, res: Http.ServerResponse, answer: Answer): Effect.Effect<void> => {
          if (res.headersSent || res.destroyed) return Effect.void
          if (!req.complete) {
            // Refused before the body was read: do not keep the connection for the rest of it.
            res.setHeader("connection", "close")
            req.resume()
            const timer = setTimeout(() => req.destroy(), 2_000)
            timer.unref()
            res.on("finish", () => {
              if (req.complete) clearTimeout(timer)
            })
          }
          if (answer.file !== undefined) {
            res.writeHead(answer.status, {
              "content-type": "application/octet-stream",
              ...(answer.file.size !== null ? { "content-length": answer.file.size } : {})
            })
            return sendStream(res, answer.file.stream)
          } else if (answer.json !== undefined) {
            const text = JSON.stringify(answer.json)
            res.writeHead(answer.status, {
              "content-type": "application/json",
              "content-length": Buffer.byteLength(text)
            })
            res.end(text)
          } else {
            res.writeHead(answer.status)
            res.end()
          }
          return Effect.void
        }

        const handle = (req: Http.IncomingMessage, res: Http.ServerResponse) =>
          route(req).pipe(
            Effect.catchTag("HttpFailure", (e) => {
              const body: AgentError = {
                error: e.message,
                reason: e.reason,
                ...(e.errno !== undefined ? { errno: e.errno } : {})
              }
              return Effect.succeed({ status: e.status, json: body } as Answer)
            }),
            Effect.catchCause((cause) =>
              Effect.as(
                Effect.logError("agent: data plane request failed", { cause: String(cause) }),
                { status: 500, json: { error: "internal error", reason: "failed" } satisfies AgentError } as Answer
              )
            ),
            // The answer is sent inside the request's scope: a file's processes live until then.
            Effect.flatMap((answer) => Effect.suspend(() => send(req, res, answer))),
            Effect.scoped
          )

        const run = yield* FiberSet.makeRuntime<never, void, never>()
        const server = Http.createServer({ keepAliveTimeout: 30_000 }, (req, res) => {
          const fiber = run(handle(req, res))
          // The client went away before its answer: stop the work (an exec is killed).
          res.on("close", () => {
            if (!res.writableFinished) fiber.interruptUnsafe()
          })
        })
        // Preview tunnels (exposed ports): the same token, the same server.
        server.on("upgrade", (req, socket, head) => {
          run(Effect.provideService(handleTunnel(req, socket, head, authorized), SandboxDriver, driver))
        })
        const port = yield* Effect.acquireRelease(
          Effect.callback<number, Error>((resume) => {
            server.once("error", (e) => resume(Effect.fail(e)))
            server.listen(
              config.port,
              config.listenHost,
              () => resume(Effect.succeed((server.address() as AddressInfo).port))
            )
          }),
          () =>
            Effect.callback<void>((resume) => {
              server.close(() => resume(Effect.void))
              // Idle keep-alive connections would hold close() open; requests in progress get a
              // grace period, then their connections are cut (which interrupts their work).
              server.closeIdleConnections()
              const timer = setTimeout(() => server.closeAllConnections(), STOP_GRACE_MS)
              timer.unref()
            })
        ).pipe(Effect.orDie)
        const host = config.advertiseHost.includes(":") ? `[${config.advertiseHost}]` : config.advertiseHost
        return DataPlane.of({ endpoint: `http://${host}:${port}`, token, port })
      })
    )

  static readonly layer = DataPlane.layerWith()
}
