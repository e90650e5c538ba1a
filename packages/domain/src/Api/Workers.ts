/**
 * GET /v1/workers (docs/contract.md#workers): the platform's worker processes that
 * heartbeated in the last 15 s. Workers are not a scopeable resource
 * (docs/contract.md#resources-and-actions) and not an account-level route
 * (docs/contract.md#account-level-routes: auth, billing, org, audit and key management): any valid
 * credential of an org may read the list, scoped keys included. It names processes, not any org's
 * data.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { Unavailable } from "../Errors.ts"
import { Bounded } from "../Text.ts"
import { Access } from "./Auth.ts"

export const Worker = Schema.Struct({
  name: Bounded(256),
  script_name: Bounded(256),
  version: Bounded(256),
  /** The NATS subject prefix the process consumes. */
  prefix: Bounded(256),
  cells: Schema.Null
})
export type Worker = typeof Worker.Type

export const WorkerList = Schema.Struct({ workers: Schema.Array(Worker).check(Schema.isMaxLength(10_000)) })
export type WorkerList = typeof WorkerList.Type

export class WorkersApi extends HttpApiGroup.make("workers")
  .add(
    HttpApiEndpoint.get("list", "/v1/workers", { success: WorkerList, error: Unavailable }).annotateMerge(
      OpenApi.annotations({
        description:
          "Worker processes (api, runtime, agent, dispatcher) seen in the last 15 s, by name. Any valid credential."
      })
    )
  )
  .annotateMerge(Access.any)
  .annotateMerge(OpenApi.annotations({ title: "Workers" }))
{}
