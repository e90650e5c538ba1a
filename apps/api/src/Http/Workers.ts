/**
 * Handler of GET /v1/workers: the `workers` KV records fresher than 15 s
 * (docs/contract.md#workers).
 */
import { listWorkers } from "@svc/bus/Workers"
import { Api } from "@svc/domain/Api"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"

export const WorkersHandlers = HttpApiBuilder.group(
  Api,
  "workers",
  Effect.fn(function*(handlers) {
    // An unreadable bucket (BusError) is the Infrastructure middleware's 503.
    return handlers.handle("list", () =>
      Effect.map(listWorkers(), (records) => ({
        workers: records.map((r) => ({
          name: r.name,
          script_name: r.script_name,
          version: r.version,
          prefix: r.prefix,
          cells: null
        }))
      })))
  })
)
