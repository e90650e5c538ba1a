import { BusHealth } from "@svc/bus/Nats"
import { DatabaseHealth } from "@svc/db/Database"
import { Api } from "@svc/domain/Api"
import { Unavailable } from "@svc/domain/Errors"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"

export const SystemHandlers = HttpApiBuilder.group(
  Api,
  "system",
  Effect.fn(function*(handlers) {
    const database = yield* DatabaseHealth
    const bus = yield* BusHealth
    return handlers.handle(
      "health",
      Effect.fn("System.health")(function*() {
        const [postgres, nats] = yield* Effect.all([database.check, bus.check], { concurrency: 2 })
        if (postgres === "down" || nats === "down") {
          const down = [postgres === "down" ? "postgres" : [], nats === "down" ? "nats" : []].flat()
          return yield* new Unavailable({ error: `Unavailable: ${down.join(" and ")} down` })
        }
        return { status: "ok" as const, postgres, nats }
      })
    )
  })
)
