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
    // One effect built once and untraced: `Effect.fn` would capture a call-site stack (an `Error`)
    // and open a span on every call, the larger part of a health check's own cost (bench/api.ts).
    const health = Effect.flatMap(monitor.current, ({ postgres, nats }) => {
      if (postgres === "down" || nats === "down") {
        const down = [postgres === "down" ? "postgres" : [], nats === "down" ? "nats" : []].flat()
        return Effect.fail(new Unavailable({ error: `Unavailable: ${down.join(" and ")} down` }))
      }
      return Effect.succeed({ status: "ok" as const, postgres, nats })
    })
    return handlers.handle("health", () => health)
  })
)
