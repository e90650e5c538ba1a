import { Api } from "@svc/domain/Api"
import { Unavailable } from "@svc/domain/Errors"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { HealthMonitor } from "../Health.ts"

export const SystemHandlers = HttpApiBuilder.group(
  Api,
  "system",
  Effect.fn(function*(handlers) {
    const monitor = yield* HealthMonitor
    return handlers.handle(
      "health",
      Effect.fn("System.health")(function*() {
        const { postgres, nats } = yield* monitor.current
        if (postgres === "down" || nats === "down") {
          const down = [postgres === "down" ? "postgres" : [], nats === "down" ? "nats" : []].flat()
          return yield* new Unavailable({ error: `Unavailable: ${down.join(" and ")} down` })
        }
        return { status: "ok" as const, postgres, nats }
      })
    )
  })
)
