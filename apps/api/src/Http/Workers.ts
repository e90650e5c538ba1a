/**
 * Handler of GET /v1/workers: the `workers` KV records fresher than 15 s
 * (docs/contract.md#workers).
 */
import { Api } from "@svc/domain/Api"
import * as Errors from "@svc/domain/Errors"
import { listWorkers } from "@svc/bus/Workers"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"

export const WorkersHandlers = HttpApiBuilder.group(
  Api,
  "workers",
  Effect.fn(function*(handlers) {
    return handlers.handle("list", () =>
      listWorkers().pipe(
        Effect.map((records) => ({
          workers: records.map((r) => ({ name: r.name, script_name: r.script_name, version: r.version, prefix: r.prefix, cells: null }))
        })),
        Effect.catchTag("BusError", (e) =>
          Effect.andThen(Effect.logWarning("workers: bucket unreadable", { error: e.message }), Effect.fail(new Errors.Unavailable())))
      ))
  })
)
