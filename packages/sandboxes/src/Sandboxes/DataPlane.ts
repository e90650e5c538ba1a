/**
 * The control plane's side of the agents' data plane (Protocol.ts): exec and files go from the
 * API process straight to the sandbox's host over HTTP, with the host's bearer token from the
 * `hosts` KV. The agent's `AgentError`s become the API's errors; anything else it answers, or
 * a host that cannot be reached, is 503 `unavailable` (the details go to the log only).
 */
import { FileListing } from "@svc/domain/Api/Sandboxes"
import * as Errors from "@svc/domain/Errors"
import { writeChunk } from "@svc/host-protocol/Backpressure"
import { AgentError, type AgentExecRequest, AgentExecResult, type HostRecord } from "@svc/host-protocol/Protocol"
import { Deferred, Effect, Option, Schema, Stream } from "effect"
import * as Http from "node:http"

export type DataPlaneError =
  | Errors.InvalidRequest
  | Errors.NotFound
  | Errors.Conflict
  | Errors.PayloadTooLarge
  | Errors.FileRefused
  | Errors.Unavailable

/** An exec touches no file of the file API: the host never answers `refused` to it. */
export type ExecError = Exclude<DataPlaneError, Errors.FileRefused>

export type FileContent =
  | {
    readonly _tag: "Bytes"
    readonly size: number | null
    readonly stream: Stream.Stream<Uint8Array, Errors.Unavailable>
  }
  | { readonly _tag: "Listing"; readonly listing: FileListing }

const decodeAgentError = Schema.decodeUnknownOption(AgentError)
const decodeExec = Schema.decodeUnknownEffect(AgentExecResult)
const decodeListing = Schema.decodeUnknownEffect(FileListing)

const unreachable = (host: HostRecord, cause: unknown) =>
  Effect.andThen(
    Effect.logWarning("data plane: host unreachable", { hostId: host.hostId, cause: String(cause) }),
    Effect.fail(new Errors.Unavailable({ error: "The sandbox's host cannot be reached; retry" }))
  )

/** A non-2xx answer of the agent as the API's error. */
const refusal = (host: HostRecord, response: Response): Effect.Effect<never, DataPlaneError> =>
  Effect.flatMap(
    Effect.promise(() => response.text().catch(() => "")),
    (text) => refusalOf(host, response.status, text)
  )

const refusalOf = (host: HostRecord, status: number, text: string): Effect.Effect<never, DataPlaneError> =>
  Effect.gen(function*() {
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      parsed = undefined
    }
    const error = decodeAgentError(parsed)
    if (Option.isSome(error)) {
      const { error: message, reason, errno } = error.value
      switch (reason) {
        case "invalid":
          return yield* new Errors.InvalidRequest({ error: message })
        case "not_found":
          return yield* new Errors.NotFound({ error: message })
        case "not_running":
          return yield* new Errors.Conflict({ error: message })
        case "too_large":
          return yield* new Errors.PayloadTooLarge({ error: message })
        case "refused":
          return yield* new Errors.FileRefused({
            error: `The sandbox's kernel refused the file operation: ${message}${
              errno !== undefined ? ` (${errno})` : ""
            }`,
            errno: errno ?? "EIO"
          })
        case "busy":
          return yield* new Errors.Unavailable({
            error: "The sandbox's host runs as many file transfers as it allows; retry"
          })
        case "unauthorized":
        case "failed":
          break
      }
    }
    yield* Effect.logWarning("data plane: host failed the request", {
      hostId: host.hostId,
      status,
      body: text.slice(0, 500)
    })
    return yield* new Errors.Unavailable({ error: "The sandbox's host could not carry out the request; retry" })
  })

const url = (host: HostRecord, sandboxId: string, what: "exec" | "files", path?: string) =>
  `${host.endpoint.replace(/\/+$/, "")}/sandboxes/${encodeURIComponent(sandboxId)}/${what}` +
  (path === undefined ? "" : `?path=${encodeURIComponent(path)}`)

const request = (host: HostRecord, target: string, init: RequestInit & { readonly timeoutMs: number }) =>
  Effect.tryPromise((signal) =>
    fetch(target, {
      ...init,
      headers: { ...(init.headers as Record<string, string> | undefined), authorization: `Bearer ${host.token}` },
      signal: AbortSignal.any([signal, AbortSignal.timeout(init.timeoutMs)])
    })
  ).pipe(Effect.catch((e) => unreachable(host, e.cause)))

/** Runs a command; waits up to its own timeout plus a margin for the host. */
export const exec = Effect.fn("DataPlane.exec")(function*(host: HostRecord, sandboxId: string, body: AgentExecRequest) {
  const response = yield* request(host, url(host, sandboxId, "exec"), {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    timeoutMs: (body.timeout_ms ?? 60_000) + 15_000
  })
  if (!response.ok) {
    return yield* refusal(host, response).pipe(
      Effect.catchTag("FileRefused", (e) => unreachable(host, `an exec answered as a file refusal: ${e.error}`))
    )
  }
  const json = yield* Effect.tryPromise(() => response.json()).pipe(
    Effect.catch((e) => unreachable(host, e.cause))
  )
  return yield* decodeExec(json).pipe(Effect.catch((e) => unreachable(host, e)))
})

/** A file's bytes (streamed from the host) or a folder's listing. */
export const readFile = Effect.fn("DataPlane.readFile")(function*(host: HostRecord, sandboxId: string, path: string) {
  const response = yield* request(host, url(host, sandboxId, "files", path), { method: "GET", timeoutMs: 600_000 })
  if (!response.ok) return yield* refusal(host, response)
  const type = response.headers.get("content-type") ?? ""
  if (type.startsWith("application/json")) {
    const json = yield* Effect.tryPromise(() => response.json()).pipe(
      Effect.catch((e) => unreachable(host, e.cause))
    )
    const listing = yield* decodeListing(json).pipe(Effect.catch((e) => unreachable(host, e)))
    return { _tag: "Listing", listing } satisfies FileContent as FileContent
  }
  const length = response.headers.get("content-length")
  const body = response.body
  const stream: Stream.Stream<Uint8Array, Errors.Unavailable> = body === null
    ? Stream.empty
    : Stream.fromReadableStream({
      evaluate: () => body,
      onError: () => new Errors.Unavailable({ error: "The sandbox's host stopped sending the file" })
    })
  return { _tag: "Bytes", size: length === null ? null : Number(length), stream } satisfies FileContent as FileContent
})

/** How long an upload may take, start to end (as the host's own transfer timeout). */
const UPLOAD_TIMEOUT_MS = 600_000
/** Of an answer to an upload, only this much is read (it is an error body or nothing). */
const MAX_ANSWER_BYTES = 64 * 1024

/**
 * Writes `body` (at most `maxBytes`; more is 413 `payload_too_large`, the transfer cut short)
 * to the file at `path`, streaming it through with backpressure: a chunk is read from the
 * client only once the host took the previous one. `node:http`, not `fetch`: fetch reads a
 * streamed request body as fast as the client sends it, whatever the host takes, and would
 * hold the difference (up to the whole upload) in this process.
 */
export const writeFile = Effect.fn("DataPlane.writeFile")(function*<E>(
  host: HostRecord,
  sandboxId: string,
  path: string,
  body: Stream.Stream<Uint8Array, E>,
  maxBytes: number
) {
  const target = new URL(url(host, sandboxId, "files", path))
  const tooLarge = () => new Errors.PayloadTooLarge({ error: `Uploads are limited to ${maxBytes} bytes` })
  type Answer = { readonly status: number; readonly text: string }
  const exchange = Effect.scoped(Effect.gen(function*() {
    const answer = yield* Deferred.make<Answer, DataPlaneError>()
    // Closed with the scope: once answered, or when the caller goes away (the host then sees
    // a cut body and keeps nothing of it).
    const req = yield* Effect.acquireRelease(
      Effect.sync(() =>
        Http.request({
          host: target.hostname.replace(/^\[|\]$/g, ""),
          port: Number(target.port || 80),
          method: "PUT",
          path: target.pathname + target.search,
          agent: false,
          headers: {
            "content-type": "application/octet-stream",
            "transfer-encoding": "chunked",
            authorization: `Bearer ${host.token}`
          }
        })
      ),
      (req) => Effect.sync(() => req.destroy())
    )
    req.on("response", (res) => {
      // The host may answer before the body is through (a refusal): that answer is the result.
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => {
        if (text.length < MAX_ANSWER_BYTES) text += chunk
      })
      res.on("end", () => Deferred.doneUnsafe(answer, Effect.succeed({ status: res.statusCode ?? 0, text })))
      res.on("error", (cause) => Deferred.doneUnsafe(answer, unreachable(host, cause)))
    })
    req.on("error", (cause) => Deferred.doneUnsafe(answer, unreachable(host, cause)))
    let total = 0
    const write = (chunk: Uint8Array) =>
      Effect.suspend(() => {
        total += chunk.length
        return total > maxBytes ? Effect.fail(tooLarge()) : writeChunk(req, chunk)
      })
    yield* body.pipe(
      Stream.runForEach(write),
      Effect.matchEffect({
        onSuccess: () => Effect.sync(() => void req.end()),
        onFailure: (e) =>
          Effect.sync(() => {
            // Cut short: the host must not take a partial body for a whole one.
            req.destroy()
            Deferred.doneUnsafe(
              answer,
              Effect.fail(
                e instanceof Errors.PayloadTooLarge
                  ? e
                  : new Errors.InvalidRequest({ error: "The request body could not be read" })
              )
            )
          })
      }),
      Effect.forkScoped
    )
    return yield* Deferred.await(answer)
  }))
  const answer = yield* exchange.pipe(
    Effect.timeoutOrElse({ duration: UPLOAD_TIMEOUT_MS, orElse: () => unreachable(host, "upload timed out") })
  )
  if (answer.status >= 200 && answer.status < 300) return
  return yield* refusalOf(host, answer.status, answer.text)
})
