/**
 * The one definition of the /v1 HTTP API: the server implements it, the SDK derives its client
 * from it, and /v1/openapi.json and /docs are generated from it.
 */
import { HttpApi, OpenApi } from "effect/http-api"
import { AppsApi } from "./Api/Apps.ts"
import { AuditApi } from "./Api/Audit.ts"
import { Access, ApiKeysApi, AuthApi, Authorization, declareBearer } from "./Api/Auth.ts"
import { BillingApi } from "./Api/Billing.ts"
import { ContextsApi } from "./Api/Contexts.ts"
import { EventsApi } from "./Api/Events.ts"
import { ForksApi } from "./Api/Forks.ts"
import { Infrastructure } from "./Api/Infrastructure.ts"
import { LifecycleApi } from "./Api/Lifecycle.ts"
import { declareLimits } from "./Api/Limits.ts"
import { declareMcp } from "./Api/Mcp.ts"
import { OrgApi } from "./Api/Org.ts"
import { PreviewsApi } from "./Api/Previews.ts"
import { ProcessesApi } from "./Api/Processes.ts"
import { SandboxesApi } from "./Api/Sandboxes.ts"
import { SandboxTelemetryApi } from "./Api/SandboxTelemetry.ts"
import { SecretsApi } from "./Api/Secrets.ts"
import { SystemApi } from "./Api/System.ts"
import { TemplatesApi } from "./Api/Templates.ts"
import { TerminalApi } from "./Api/Terminal.ts"
import { VolumesApi } from "./Api/Volumes.ts"
import { WebhooksApi } from "./Api/Webhooks.ts"
import { WorkersApi } from "./Api/Workers.ts"

export class Api extends HttpApi.make("svc")
  .add(SystemApi.annotateMerge(Access.public))
  .add(AuthApi)
  .add(ApiKeysApi)
  .add(OrgApi)
  .add(AuditApi)
  .add(SandboxesApi)
  .add(PreviewsApi)
  .add(WorkersApi)
  .add(WebhooksApi)
  .add(EventsApi)
  .add(SecretsApi)
  .add(TemplatesApi)
  .add(VolumesApi)
  .add(ProcessesApi)
  .add(TerminalApi)
  .add(ContextsApi)
  .add(BillingApi)
  .add(AppsApi)
  .add(SandboxTelemetryApi)
  .add(LifecycleApi)
  .add(ForksApi)
  // Authentication and each endpoint's declared Access rule: keep this after the last .add
  // (it applies to the endpoints added before it; the authorization matrix test checks).
  .middleware(Authorization)
  // A database or bus failure of any endpoint, Authorization's credential checks included, is
  // answered in one place: declared after Authorization, it runs around it.
  .middleware(Infrastructure)
  // Report every invalid field of a request at once, not only the first.
  .annotate(HttpApi.ParseOptions, { errors: "all" })
  // A body field the contract does not know is 400 `invalid_request` naming it, never ignored: a
  // client's typo or a feature the server lacks (a template's `image`) must not become a
  // different action. Bodies only: headers and query strings carry transport extras.
  .annotate(HttpApi.PayloadParseOptions, { errors: "all", onExcessProperty: "error" })
  .annotate(HttpApi.SuccessParseOptions, {})
  .annotateMerge(OpenApi.annotations({
    title: "Sandbox platform API",
    version: "1",
    // Every endpoint takes the bearer credential (Authorization's own check, not its `security`);
    // the limits every answer shares (the global middleware's and Node's) are declared on each;
    // POST /mcp, served outside the HttpApi, is added first so that both apply to it too.
    transform: (spec) => declareLimits(declareBearer(declareMcp(spec)))
  }))
{}
