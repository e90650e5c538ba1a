/**
 * A sandbox's log and metrics (docs/contract.md#sandbox-logs-and-metrics): `sandboxes:read`, and
 * for a `sandbox:<id>` key the single-sandbox policy; another org's sandbox is 404.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { InvalidRequest, NotFound, SandboxOutOfScope, Unavailable } from "../Errors.ts"
import { SandboxId } from "../Ids.ts"
import { MetricSamples } from "../SandboxTelemetry.ts"
import { Bounded } from "../Text.ts"
import { Access } from "./Auth.ts"

const params = { id: SandboxId }
const Since = Schema.optionalKey(Bounded(64))

export class SandboxTelemetryApi extends HttpApiGroup.make("sandboxTelemetry")
  .add(
    HttpApiEndpoint.get("logs", "/v1/sandboxes/:id/logs", {
      params,
      query: Schema.Struct({ follow: Schema.optionalKey(Schema.Literals(["true", "false"])), since: Since }),
      headers: { "last-event-id": Schema.optionalKey(Bounded(256)) },
      success: HttpApiSchema.StreamUint8Array({ contentType: "text/plain" }),
      error: [InvalidRequest, NotFound, SandboxOutOfScope, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "The sandbox's log, one line each: `<ts> <source>: <text>`, source `lifecycle` (created, " +
        "starting, started, stopping, stopped with its reason, error), `host` (how a run ended: `out of memory: ...`, " +
        "`exited: ...`; output dropped over the rate bound) or `start_cmd` (its template's start command's output, " +
        "at most 100 lines per second kept). `since`: an ISO 8601 time or a duration back from now (`30s`, `15m`, " +
        "`2h`, `1d`). `follow=true`: server-sent events (`event: log`, `id` the line's sequence, `data:` the line) " +
        "with the lines stored, then new ones as they come; `Last-Event-ID` (digits) resumes after that line: " +
        "every later line still kept, none twice."
    })),
    HttpApiEndpoint.get("metrics", "/v1/sandboxes/:id/metrics", {
      params,
      query: Schema.Struct({ since: Since }),
      success: MetricSamples,
      error: [InvalidRequest, NotFound, SandboxOutOfScope, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Samples of the sandbox taken every 5 s while it runs, oldest first, kept 24 h. `since` as for " +
        "the log."
    }))
  )
  .annotateMerge(Access.resource("sandboxes"))
  .annotateMerge(OpenApi.annotations({ title: "Sandbox logs and metrics" }))
{}
