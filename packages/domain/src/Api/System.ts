/** Health of the platform as seen by one API process. */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { Unavailable } from "../Errors.ts"

export const DependencyState = Schema.Literals(["up", "down"])

export const Health = Schema.Struct({
  status: Schema.Literal("ok"),
  postgres: DependencyState,
  nats: DependencyState
})
export type Health = typeof Health.Type

export class SystemApi extends HttpApiGroup.make("system")
  .add(
    HttpApiEndpoint.get("health", "/v1/health", {
      success: Health,
      error: Unavailable
    }).annotateMerge(OpenApi.annotations({
      description: "200 when Postgres and NATS both answer; 503 `unavailable` naming the one that does not."
    }))
  )
{}
