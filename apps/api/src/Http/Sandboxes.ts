/**
 * Handlers of the `sandboxes` group (docs/contract.md#sandboxes). The middleware has checked the
 * `sandboxes` scope; each handler loads the org's sandbox (404 for another org's or a missing
 * one) and applies the single-sandbox policy (403 `sandbox_out_of_scope`) before acting.
 *
 * File transfers stream between the client and the sandbox's host (nothing is held whole); an
 * API process runs at most `SVC_API_MAX_TRANSFERS` at once (default 64). One more waits up to
 * `TRANSFER_WAIT` for a slot, then is 503 `unavailable` (retry). A slot is held until the
 * response is sent: a download keeps it while its bytes flow. One org holds at most
 * `SVC_API_MAX_TRANSFERS_PER_ORG` of them (default 16); one more is 429 `rate_limited` at once,
 * so that an org's transfers never wait behind another org's. A transfer that moves no byte for
 * `SVC_API_TRANSFER_IDLE_TIMEOUT` (a client that stalls, a sandbox that reads or writes nothing, as a
 * FIFO) has its connection closed and its slot freed.
 */
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { confinedSandbox, egressPolicy, requireScope, sandboxPolicy } from "@svc/auth/Authorization"
import { Billing } from "@svc/billing/Billing"
import type * as Rows from "@svc/db/Rows"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import * as Errors from "@svc/domain/Errors"
import type { OrgId, SandboxId } from "@svc/domain/Ids"
import type { ExecResult } from "@svc/domain/Sandbox"
import * as TransferIdle from "@svc/host-protocol/TransferIdle"
import { Hosts } from "@svc/hosts/Hosts"
import type * as Splice from "@svc/hosts/Splice"
import { Previews } from "@svc/sandboxes/Previews"
import { type ProcessError, Processes, Sse } from "@svc/sandboxes/Processes"
import { Sandboxes, toRecord } from "@svc/sandboxes/Sandboxes"
import { Duration, Effect, Layer, Semaphore } from "effect"
import { type HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import * as Http from "node:http"
import { ApiMaxTransfers, ApiMaxTransfersPerOrg, TransferIdleTimeout } from "../Config.ts"
import { PreviewProxyLayer } from "../Preview.ts"
import { ContextsHandlers } from "./Contexts.ts"
import { EventsGroup } from "./Events.ts"
import { LifecycleGroup } from "./Lifecycle.ts"
import { PreviewsGroup } from "./Previews.ts"
import { ProcessesGroup, wantsEvents } from "./Processes.ts"
import { TerminalGroup } from "./Terminal.ts"
import { WorkersHandlers } from "./Workers.ts"

/** How long a transfer beyond the bound waits for a slot. */
export const TRANSFER_WAIT = Duration.seconds(30)

/** A transfer's connection, closed once idle for `idle` (@svc/host-protocol/TransferIdle). */
const closeWhenIdle = (request: HttpServerRequest.HttpServerRequest, idle: Duration.Duration) =>
  TransferIdle.closeWhenIdle(
    NodeHttpServerRequest.toIncomingMessage(request).socket,
    Duration.toMillis(idle),
    Effect.logInfo("api: file transfer idle, connection closed", { url: request.url, idleMs: Duration.toMillis(idle) })
  )

/** The client's HTTP/1 connection, for a transfer the kernel splices into or out of it (@svc/hosts/Splice). */
const clientConnection = (
  request: HttpServerRequest.HttpServerRequest,
  idle: Duration.Duration
): Splice.ClientConnection | undefined => {
  const response = NodeHttpServerRequest.toServerResponse(request)
  return response instanceof Http.ServerResponse ? { response, idleMs: Duration.toMillis(idle) } : undefined
}

/** An archive upload's format by its `Content-Type` (no type, or raw bytes: a tar). */
const archiveFormatOf = (header: string | undefined): "tar" | "tar.gz" | undefined => {
  const type = (header ?? "").split(";")[0]!.trim().toLowerCase()
  if (type === "application/gzip" || type === "application/x-gzip" || type === "application/x-tar+gzip") {
    return "tar.gz"
  }
  if (type === "" || type === "application/x-tar" || type === "application/octet-stream") return "tar"
  return undefined
}

export const SandboxesGroup = HttpApiBuilder.group(
  Api,
  "sandboxes",
  Effect.fn(function*(handlers) {
    const sandboxes = yield* Sandboxes
    const processes = yield* Processes
    const transfers = yield* Semaphore.make(yield* ApiMaxTransfers)
    const perOrg = yield* ApiMaxTransfersPerOrg
    const idle = yield* TransferIdleTimeout
    /** Transfers each org holds now (an org holding none has no entry). */
    const held = new Map<OrgId, number>()

    /** One of the org's own slots until the response is sent, or 429 at once when it holds them all. */
    const orgSlot = (orgId: OrgId) =>
      Effect.acquireRelease(
        Effect.suspend(() => {
          const n = held.get(orgId) ?? 0
          if (n >= perOrg) {
            return Effect.fail(
              new Errors.RateLimited({
                error:
                  `This org runs ${perOrg} file transfers at once through this API process, as many as it may; retry`,
                retry_after_s: 1
              })
            )
          }
          held.set(orgId, n + 1)
          return Effect.void
        }),
        () =>
          Effect.sync(() => {
            const n = (held.get(orgId) ?? 1) - 1
            if (n === 0) held.delete(orgId)
            else held.set(orgId, n)
          })
      )

    /**
     * The org's slot, then one of the process's (until the request's response is sent, its
     * scope), or 503 after the wait; the connection closes once the transfer idles.
     */
    const transferSlot = (orgId: OrgId, request: HttpServerRequest.HttpServerRequest) =>
      Effect.gen(function*() {
        yield* orgSlot(orgId)
        const slot = yield* transfers.takeScoped(1).pipe(Effect.timeoutOption(TRANSFER_WAIT))
        if (slot._tag === "None") {
          return yield* new Errors.Unavailable({
            error: "This API process runs as many file transfers as it allows; retry"
          })
        }
        yield* closeWhenIdle(request, idle)
      })

    /** The caller's org and the sandbox, once the policy allows it. */
    const target = (id: string) =>
      Effect.gen(function*() {
        const principal = yield* CurrentPrincipal
        const sandbox = yield* sandboxes.get(principal.orgId, id)
        yield* sandboxPolicy({ id: sandbox.id, parentId: sandbox.parentId })
        return principal.orgId as OrgId
      })

    /**
     * The egress policy of the sandbox a `sandbox:<id>` key is confined to (its ceiling). A key
     * minted for a sandbox that does not exist has nothing to create under: 400 on `parent_id`,
     * as the create itself would answer.
     */
    const ceilingOf = (orgId: OrgId, id: SandboxId) =>
      sandboxes.get(orgId, id).pipe(
        Effect.map((sandbox) => sandbox.network),
        Effect.catchTag("NotFound", () =>
          Effect.fail(
            new Errors.InvalidRequest({
              error: "parent_id: no such sandbox in this org",
              issues: [{ path: "parent_id", message: "no such sandbox in this org" }]
            })
          ))
      )

    return handlers
      .handle("create", ({ payload, headers }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          // Binding secrets at create is a use of them (docs/contract.md#secrets-scopes).
          if (payload.secrets.length > 0) yield* requireScope("secrets", "use")
          // Attaching a volume uses it: `ro` mounts need volumes:read, `rw` ones volumes:write.
          if (payload.volumes.some((v) => v.mode === "rw")) yield* requireScope("volumes", "write")
          else if (payload.volumes.length > 0) yield* requireScope("volumes", "read")
          const permission = yield* sandboxPolicy({ create: { parentId: payload.parent_id } })
          const parentId = permission._tag === "CreateAs" ? permission.parentId : payload.parent_id
          // A confined key's child starts from its parent's egress and may only narrow it.
          const network = yield* egressPolicy("child", payload.network, (id) => ceilingOf(principal.orgId, id))
          const result = yield* sandboxes.create(
            principal.orgId,
            { ...payload, parent_id: parentId, network },
            headers["idempotency-key"]
          )
          // A replay answers 200 with the first response, as it was.
          return result._tag === "Created" ? result.value : HttpServerResponse.jsonUnsafe(result.body, { status: 200 })
        }))
      .handle("list", ({ query }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const confined = yield* confinedSandbox
          return yield* sandboxes.list(principal.orgId, query, confined)
        }))
      .handle("get", ({ params }) =>
        Effect.gen(function*() {
          const orgId = yield* target(params.id)
          return toRecord(yield* sandboxes.get(orgId, params.id))
        }))
      .handle(
        "delete",
        ({ params }) => Effect.flatMap(target(params.id), (orgId) => sandboxes.remove(orgId, params.id))
      )
      .handle("stop", ({ params }) => Effect.flatMap(target(params.id), (orgId) => sandboxes.stop(orgId, params.id)))
      .handle("start", ({ params }) => Effect.flatMap(target(params.id), (orgId) => sandboxes.start(orgId, params.id)))
      .handle("network", ({ params, payload }) =>
        Effect.gen(function*() {
          const orgId = yield* target(params.id)
          const network = yield* egressPolicy("update", payload, (id) => ceilingOf(orgId, id))
          return yield* sandboxes.setNetwork(orgId, params.id, network)
        }))
      .handle(
        "bindSecret",
        ({ params, payload }) =>
          Effect.flatMap(target(params.id), (orgId) => sandboxes.bindSecret(orgId, params.id, payload.secret_id))
      )
      .handle(
        "exec",
        ({ params, payload, request }) =>
          Effect.flatMap(
            target(params.id),
            (orgId): Effect.Effect<
              ExecResult | HttpServerResponse.HttpServerResponse,
              ProcessError | Errors.PayloadTooLarge | Rows.QueryError
            > =>
              // `Accept: text/event-stream`: the output as it comes (docs/contract.md#sandbox-processes).
              wantsEvents(request)
                ? Effect.map(processes.execStream(orgId, params.id, payload), Sse.response)
                : sandboxes.exec(orgId, params.id, payload)
          )
      )
      .handle("stats", ({ params }) => Effect.flatMap(target(params.id), (orgId) => sandboxes.stats(orgId, params.id)))
      .handle("readFile", ({ params, query, request }) =>
        Effect.gen(function*() {
          const orgId = yield* target(params.id)
          yield* transferSlot(orgId, request)
          const content = yield* sandboxes.readFile(orgId, params.id, query.path)
          if (content._tag === "Listing") return content.listing
          // The kernel moves the bytes from the host's connection to the client's where both
          // allow it (its length is then on the Node response: none pass through the
          // framework's count); else the host's response is piped as it is: no effect per chunk.
          const client = clientConnection(request, idle)
          const spliced = client !== undefined && content.spliceInto?.(client) === true
          return HttpServerResponse.raw(content.readable, {
            contentType: "application/octet-stream",
            ...(content.size !== null && !spliced ? { contentLength: content.size } : {})
          })
        }))
      .handle("writeFile", ({ params, query, request }) =>
        Effect.gen(function*() {
          const orgId = yield* target(params.id)
          yield* transferSlot(orgId, request)
          // Streamed to the sandbox's disk: `disk_gb` is the only bound (507 past it).
          // The client's request piped to the host as it is: no effect per chunk; a body of
          // declared length moved by the kernel where the connections allow it (Splice.ts).
          const body = NodeHttpServerRequest.toIncomingMessage(request)
          yield* sandboxes.writeFile(
            orgId,
            params.id,
            query.path,
            body,
            Number.MAX_SAFE_INTEGER,
            {
              ...(query.mode !== undefined ? { mode: query.mode } : {}),
              ...(query.parents !== undefined ? { parents: query.parents } : {})
            },
            clientConnection(request, idle)
          )
        }))
      .handle("readArchive", ({ params, query, request }) =>
        Effect.gen(function*() {
          const orgId = yield* target(params.id)
          yield* transferSlot(orgId, request)
          const format = query.format ?? "tar"
          const stream = yield* sandboxes.readArchive(orgId, params.id, query.path, format)
          return HttpServerResponse.stream(stream, {
            contentType: format === "tar.gz" ? "application/gzip" : "application/x-tar"
          })
        }))
      .handle("fileWatch", ({ params, query }) =>
        Effect.gen(function*() {
          const orgId = yield* target(params.id)
          return Sse.response(yield* sandboxes.watch(orgId, params.id, query.path, query.recursive !== "false"))
        }))
      .handle("writeArchive", ({ params, query, request }) =>
        Effect.gen(function*() {
          const orgId = yield* target(params.id)
          const format = archiveFormatOf(request.headers["content-type"])
          if (format === undefined) {
            return yield* new Errors.UnsupportedMediaType({
              error: "Send the archive as application/x-tar or application/gzip (a tar.gz)"
            })
          }
          yield* transferSlot(orgId, request)
          yield* sandboxes.writeArchive(orgId, params.id, query.path, request.stream, format)
        }))
      // File management (docs/contract.md#files): one short call to the host each, no transfer slot.
      .handle("fileStat", ({ params, query }) =>
        Effect.flatMap(
          target(params.id),
          (orgId) => sandboxes.fileOp(orgId, params.id, (api) => api.stat({ params: { id: params.id }, query }))
        ))
      .handle("mkdir", ({ params, payload }) =>
        Effect.gen(function*() {
          const orgId = yield* target(params.id)
          const result = yield* sandboxes.fileOp(orgId, params.id, (api) =>
            api.mkdir({
              params: { id: params.id },
              payload: {
                path: payload.path,
                parents: payload.parents ?? true,
                mode: payload.mode !== undefined ? parseInt(payload.mode, 8) : 0o755
              }
            }))
          // A folder `parents` found there already: 200, not 201.
          return result.created ? result.info : HttpServerResponse.jsonUnsafe(result.info, { status: 200 })
        }))
      .handle(
        "move",
        ({ params, payload }) =>
          Effect.flatMap(target(params.id), (orgId) =>
            sandboxes.fileOp(orgId, params.id, (api) =>
              api.move({
                params: { id: params.id },
                payload: { from: payload.from, to: payload.to, overwrite: payload.overwrite ?? false }
              })))
      )
      .handle(
        "removeFile",
        ({ params, query }) =>
          Effect.flatMap(target(params.id), (orgId) =>
            sandboxes.fileOp(orgId, params.id, (api) =>
              api.remove({
                params: { id: params.id },
                payload: { path: query.path, recursive: query.recursive === "true" }
              })))
      )
  })
)

/**
 * The sandboxes, processes, terminal, exposed ports and workers routes with their services, and the preview proxy
 * when the server has hooks for it; needs `SqlClient`, `Nats`, `SecretBox` and `ApiKeys`.
 */
export const SandboxesHandlers = Layer.mergeAll(
  SandboxesGroup,
  PreviewsGroup,
  EventsGroup,
  WorkersHandlers,
  PreviewProxyLayer,
  ProcessesGroup,
  TerminalGroup,
  ContextsHandlers,
  LifecycleGroup
).pipe(
  Layer.provide(Previews.layer),
  Layer.provide(Processes.layer),
  Layer.provideMerge(Sandboxes.layer),
  // A blocked org's creates and starts are 402 (docs/contract.md#billing).
  Layer.provide(Billing.gate),
  Layer.provide(Hosts.layer)
)
