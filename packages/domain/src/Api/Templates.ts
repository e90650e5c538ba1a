/**
 * The template routes (docs/contract.md#templates) and a sandbox's snapshot. `templates:read`
 * reads, `templates:write` creates and deletes; a `sandbox:<id>` key is refused (403) unless the
 * templates scopes were added to it. The snapshot route is a sandbox's that makes an org template:
 * `sandboxes:write` and `templates:write` (a `sandbox:<id>` key needs `templates:write` added).
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { Conflict, InvalidRequest, NotFound, SandboxOutOfScope, Unavailable } from "../Errors.ts"
import { ListQuery } from "../Pagination.ts"
import { CreateTemplateRequest, SnapshotRequest, Template, TemplatePage, UpdateTemplateRequest } from "../Template.ts"
import { IdText } from "../Text.ts"
import { Access } from "./Auth.ts"

export class CreateTemplateBody
  extends Schema.Class<CreateTemplateBody>("CreateTemplateRequest")(CreateTemplateRequest.fields)
{}
export class UpdateTemplateBody
  extends Schema.Class<UpdateTemplateBody>("UpdateTemplateRequest")(UpdateTemplateRequest.fields)
{}
export class SnapshotBody extends Schema.Class<SnapshotBody>("SnapshotRequest")(SnapshotRequest.fields) {}

const params = { id: IdText }
const LogsQuery = Schema.Struct({ follow: Schema.optionalKey(Schema.Literals(["true", "false"])) })

export class TemplatesApi extends HttpApiGroup.make("templates")
  .add(
    HttpApiEndpoint.post("create", "/v1/templates", {
      payload: CreateTemplateBody,
      success: Template.pipe(HttpApiSchema.status(202)),
      error: [InvalidRequest, Conflict, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Builds a template asynchronously on a host: `building`, then `ready` with `image` or " +
        "`failed` with `errorMessage`; either end emits `template.state_updated`."
    })),
    HttpApiEndpoint.get("list", "/v1/templates", { query: ListQuery, success: TemplatePage, error: [InvalidRequest] }),
    HttpApiEndpoint.get("get", "/v1/templates/:id", { params, success: Template, error: [NotFound] }),
    HttpApiEndpoint.get("logs", "/v1/templates/:id/logs", {
      params,
      query: LogsQuery,
      success: HttpApiSchema.StreamUint8Array({ contentType: "text/plain" }),
      error: [NotFound, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "The build log (`text/plain`); with `follow=true` the answer stays open until the build ends."
    })),
    HttpApiEndpoint.patch("update", "/v1/templates/:id", {
      params,
      payload: UpdateTemplateBody,
      success: Template,
      error: [InvalidRequest, NotFound, Conflict]
    }).annotateMerge(OpenApi.annotations({
      description: "Sets `pool_size` (0 to 50): that many sandboxes of the template kept booted and handed out " +
        "on create. A change of size drains or grows the pool in the background. `base` and `debian` are 409."
    })),
    HttpApiEndpoint.delete("delete", "/v1/templates/:id", {
      params,
      success: Template,
      error: [NotFound, Conflict]
    }),
    HttpApiEndpoint.post("snapshot", "/v1/sandboxes/:id/snapshot", {
      params,
      payload: SnapshotBody,
      success: Template.pipe(HttpApiSchema.status(202)),
      error: [InvalidRequest, NotFound, Conflict, SandboxOutOfScope, Unavailable]
    }).annotateMerge(Access.resource("sandboxes", { also: ["templates:write"] })).annotateMerge(OpenApi.annotations({
      description: "Captures a running sandbox's file system as a template: 202 `building`, then `ready` like " +
        "any template. Needs `sandboxes:write` and `templates:write`. A sandbox that is not running is 409."
    }))
  )
  .annotateMerge(Access.resource("templates"))
  .annotateMerge(OpenApi.annotations({ title: "Templates" }))
{}
