/**
 * The app routes (docs/contract.md#apps). `apps:read` lists and reads, `apps:write` creates,
 * updates and deletes; a `sandbox:<id>` key is 403 here unless it holds app scopes too. Another
 * org's app is 404.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { App, AppList, CreateAppRequest, UpdateAppRequest } from "../App.ts"
import {
  Conflict,
  IdempotencyKeyReused,
  InvalidRequest,
  NotFound,
  QuotaExceeded,
  Unavailable,
  UsageLimitReached
} from "../Errors.ts"
import { AppId } from "../Ids.ts"
import { ListQuery } from "../Pagination.ts"
import { Access } from "./Auth.ts"
import { IdempotencyKey } from "./Sandboxes.ts"

export class CreateAppBody extends Schema.Class<CreateAppBody>("CreateAppRequest")(CreateAppRequest.fields) {}

export class UpdateAppBody extends Schema.Class<UpdateAppBody>("UpdateAppRequest")(UpdateAppRequest.fields) {}

const params = { id: AppId }

export class AppsApi extends HttpApiGroup.make("apps")
  .add(
    HttpApiEndpoint.post("create", "/v1/apps", {
      payload: CreateAppBody,
      headers: { "idempotency-key": Schema.optionalKey(IdempotencyKey) },
      success: App.pipe(HttpApiSchema.status(201)),
      error: [InvalidRequest, Conflict, IdempotencyKeyReused, UsageLimitReached, QuotaExceeded, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Creates an app: 201 with the record (`state: \"deploying\"`). The platform keeps `replicas` " +
        "sandboxes of `template` running `cmd` (with `env` and `exposed_ports`), replacing any whose sandbox or " +
        "command ends. Names are unique in the org (409). 402 `usage_limit_reached` while the org is blocked at its " +
        "hard usage limit. `Idempotency-Key`: the same key and body within 24 h answer 200 with the first " +
        "response; another body is 422."
    })),
    HttpApiEndpoint.get("list", "/v1/apps", {
      query: ListQuery,
      success: AppList,
      error: [InvalidRequest, Unavailable]
    }).annotateMerge(OpenApi.annotations({ description: "The org's apps, newest first (deleted ones omitted)." })),
    HttpApiEndpoint.get("get", "/v1/apps/:id", {
      params,
      success: App,
      error: [NotFound, Unavailable]
    }),
    HttpApiEndpoint.patch("update", "/v1/apps/:id", {
      params,
      payload: UpdateAppBody,
      success: App,
      error: [InvalidRequest, NotFound, Conflict, UsageLimitReached, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Changes `replicas` (scales up or down), `env` (the whole map) or `cmd`: 200 with the record. " +
        "A new `cmd` or `env` rolls the replicas over one at a time, a new one ready before an old one goes. " +
        "409 while the app is being deleted; 402 for a scale-up while the org is blocked."
    })),
    HttpApiEndpoint.delete("delete", "/v1/apps/:id", {
      params,
      success: App,
      error: [NotFound, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Deletes the app and its sandboxes: 200 with the record (`state: \"deleting\"` until they are " +
        "gone, then the app is not found)."
    }))
  )
  .annotateMerge(Access.resource("apps"))
  .annotateMerge(OpenApi.annotations({ title: "Apps" }))
{}
