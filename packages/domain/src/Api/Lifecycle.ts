/**
 * A sandbox's lifecycle routes (docs/contract.md#lifecycle-timeouts-idleness-resume): the
 * `sandboxes` scope (`write`) and the single-sandbox policy, as every sandbox route.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { Conflict, InvalidRequest, NotFound, SandboxOutOfScope, Unavailable } from "../Errors.ts"
import { SandboxId } from "../Ids.ts"
import { SetTimeoutRequest } from "../Lifecycle.ts"
import { Sandbox } from "../Sandbox.ts"
import { Access } from "./Auth.ts"

export class SetTimeoutBody extends Schema.Class<SetTimeoutBody>("SetTimeoutRequest")(SetTimeoutRequest.fields) {}

export class LifecycleApi extends HttpApiGroup.make("lifecycle")
  .add(
    HttpApiEndpoint.put("setTimeout", "/v1/sandboxes/:id/timeout", {
      params: { id: SandboxId },
      payload: SetTimeoutBody,
      success: Sandbox,
      error: [InvalidRequest, NotFound, Conflict, SandboxOutOfScope, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "A keep-alive: `timeout_s` (1 to 2592000 s) counts again from now, `idle_timeout_s` (the same " +
        "bounds) replaces the idle limit and restarts its clock; `null` removes either, a field left out is kept. " +
        "200 with the record (`expiresAt` shows the new end); 409 for a deleting or deleted sandbox."
    }))
  )
  .annotateMerge(Access.resource("sandboxes"))
  .annotateMerge(OpenApi.annotations({ title: "Lifecycle" }))
{}
