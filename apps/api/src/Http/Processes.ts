/**
 * Handlers of the `processes` group (docs/contract.md#sandbox-processes): background processes
 * of a sandbox, through its host. Each loads the org's sandbox (404 for another org's) and
 * applies the single-sandbox policy before acting, as the sandbox routes do (`targetIn`, the
 * contexts' routes' too). `wantsEvents` tells the exec route (`Sandboxes.ts`) when to stream.
 */
import { sandboxPolicy } from "@svc/auth/Authorization"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import { MAX_STDIN_BYTES } from "@svc/domain/Api/Processes"
import * as Errors from "@svc/domain/Errors"
import type { OrgId } from "@svc/domain/Ids"
import { Processes as ProcessesService, Sse } from "@svc/sandboxes/Processes"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { Effect } from "effect"
import type { HttpServerRequest } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"

/** An exec asked for as server-sent events (`Accept: text/event-stream`). */
export const wantsEvents = (request: HttpServerRequest.HttpServerRequest) =>
  (request.headers["accept"] ?? "").toLowerCase().includes("text/event-stream")

/**
 * The caller's org once the sandbox is the org's and the policy allows it (the processes' and the
 * code contexts' routes).
 */
export const targetIn = (sandboxes: Sandboxes["Service"]) => (id: string) =>
  Effect.gen(function*() {
    const principal = yield* CurrentPrincipal
    const sandbox = yield* sandboxes.get(principal.orgId, id)
    yield* sandboxPolicy({ id: sandbox.id, parentId: sandbox.parentId })
    return principal.orgId as OrgId
  })

/** A pid as the route names it: digits only (anything else names no process). */
const pidOf = (pid: string) =>
  /^[1-9]\d{0,9}$/.test(pid)
    ? Effect.succeed(pid)
    : Effect.fail(new Errors.NotFound({ error: `No process ${pid.slice(0, 40)} in this sandbox` }))

export const ProcessesGroup = HttpApiBuilder.group(
  Api,
  "processes",
  Effect.fn(function*(handlers) {
    const processes = yield* ProcessesService
    const sandboxTarget = targetIn(yield* Sandboxes)
    return handlers
      .handle(
        "start",
        ({ params, payload }) =>
          Effect.flatMap(sandboxTarget(params.id), (orgId) => processes.start(orgId, params.id, payload))
      )
      .handle(
        "list",
        ({ params }) =>
          Effect.flatMap(
            sandboxTarget(params.id),
            (orgId) => Effect.map(processes.list(orgId, params.id), (rows) => ({ processes: rows }))
          )
      )
      .handle("get", ({ params }) =>
        Effect.gen(function*() {
          const orgId = yield* sandboxTarget(params.id)
          return yield* processes.get(orgId, params.id, yield* pidOf(params.pid))
        }))
      .handle("output", ({ params, query }) =>
        Effect.gen(function*() {
          const orgId = yield* sandboxTarget(params.id)
          return Sse.response(
            yield* processes.output(orgId, params.id, yield* pidOf(params.pid), query.follow === "true")
          )
        }))
      .handle("stdin", ({ params, query, request }) =>
        Effect.gen(function*() {
          const orgId = yield* sandboxTarget(params.id)
          const pid = yield* pidOf(params.pid)
          const declared = request.headers["content-length"]
          if (declared !== undefined && Number(declared) > MAX_STDIN_BYTES) {
            return yield* new Errors.PayloadTooLarge({ error: `stdin writes are limited to ${MAX_STDIN_BYTES} bytes` })
          }
          yield* processes.stdin(orgId, params.id, pid, request.stream, query.close === "true", MAX_STDIN_BYTES)
        }))
      .handle("signal", ({ params, payload }) =>
        Effect.gen(function*() {
          const orgId = yield* sandboxTarget(params.id)
          yield* processes.signal(orgId, params.id, yield* pidOf(params.pid), payload.signal)
        }))
  })
)
