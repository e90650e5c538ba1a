/**
 * Handlers of the `contexts` group (docs/contract.md#code-contexts): stateful interpreters in a
 * sandbox, through its exec and processes. Each loads the org's sandbox (404 for another org's)
 * and applies the single-sandbox policy before acting, as the sandbox routes do.
 */
import { Api } from "@svc/domain/Api"
import { MAX_CODE_BYTES } from "@svc/domain/Api/Contexts"
import * as Errors from "@svc/domain/Errors"
import { Contexts } from "@svc/sandboxes/Contexts"
import { Sse } from "@svc/sandboxes/Processes"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { Effect, Layer } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { targetIn, wantsEvents } from "./Processes.ts"

const ContextsGroup = HttpApiBuilder.group(
  Api,
  "contexts",
  Effect.fn(function*(handlers) {
    const contexts = yield* Contexts
    const target = targetIn(yield* Sandboxes)
    return handlers
      .handle(
        "create",
        ({ params, payload }) =>
          Effect.flatMap(target(params.id), (orgId) => contexts.create(orgId, params.id, payload))
      )
      .handle("list", ({ params }) =>
        Effect.flatMap(
          target(params.id),
          (orgId) => Effect.map(contexts.list(orgId, params.id), (rows) => ({ contexts: rows }))
        ))
      .handle(
        "get",
        ({ params }) => Effect.flatMap(target(params.id), (orgId) => contexts.get(orgId, params.id, params.ctx))
      )
      .handle("run", ({ params, payload, request }) =>
        Effect.gen(function*() {
          const orgId = yield* target(params.id)
          if (Buffer.byteLength(payload.code, "utf8") > MAX_CODE_BYTES) {
            return yield* new Errors.PayloadTooLarge({ error: `Code is limited to ${MAX_CODE_BYTES} bytes` })
          }
          return wantsEvents(request)
            ? Sse.response(yield* contexts.runStream(orgId, params.id, params.ctx, payload.code, payload.timeout_ms))
            : yield* contexts.run(orgId, params.id, params.ctx, payload.code, payload.timeout_ms)
        }))
      .handle(
        "interrupt",
        ({ params }) => Effect.flatMap(target(params.id), (orgId) => contexts.interrupt(orgId, params.id, params.ctx))
      )
      .handle(
        "remove",
        ({ params }) => Effect.flatMap(target(params.id), (orgId) => contexts.remove(orgId, params.id, params.ctx))
      )
  })
)

/** The contexts routes with their service; needs `Sandboxes` and `Processes`. */
export const ContextsHandlers = ContextsGroup.pipe(Layer.provide(Contexts.layer))
