/**
 * The Promise client, for JavaScript and TypeScript without Effect:
 *
 *   import { Svc } from "@svc/sdk"
 *   const svc = new Svc()                       // SVC_API_URL, SVC_API_KEY
 *   const sandbox = await svc.sandboxes.create({ name: "demo" })   // resolves once running
 *   const { stdout } = await sandbox.exec("echo hello")
 *   await sandbox.delete()
 *
 * Records are the API's JSON exactly (timestamps are ISO strings): their types are the encoded
 * side of the server's own schemas (`@svc/domain`). Every non-2xx answer is thrown as a
 * `SvcError` with the answer's `status`, `code` and details.
 *
 * One module per resource (`Sandboxes.ts`, `Processes.ts`, `Terminal.ts`, `Templates.ts`,
 * `Volumes.ts`, `Apps.ts`, `Secrets.ts`, `WebhookEndpoints.ts`, `Keys.ts`, `Account.ts`,
 * `Events.ts`) over one transport (`Http.ts`); this one composes them and is what `index.ts`
 * exports.
 */
import { Audit, Billing, OrgResource, Workers } from "./Account.ts"
import { Apps } from "./Apps.ts"
import { type EventsOptions, EventStream } from "./Events.ts"
import { Http, type SvcOptions } from "./Http.ts"
import { Keys } from "./Keys.ts"
import { Sandboxes } from "./Sandboxes.ts"
import { Secrets } from "./Secrets.ts"
import { Templates } from "./Templates.ts"
import type * as T from "./Types.ts"
import { Volumes } from "./Volumes.ts"
import { Webhooks } from "./WebhookEndpoints.ts"

export type { AuditListOptions } from "./Account.ts"
export { CodeContext, Contexts, type CreateContextOptions } from "./Contexts.ts"
export { type EventsOptions, EventStream, type SvcEvent } from "./Events.ts"
export {
  DEFAULT_BASE_URL,
  type ListOptions,
  type Page,
  SvcError,
  type SvcOptions,
  type WaitOptions,
  type WebSocketConstructor,
  type WebSocketLike
} from "./Http.ts"
export {
  type OutputChunk,
  type OutputOptions,
  Process,
  type ProcessLogs,
  type ProcessSignal,
  type StartProcessOptions
} from "./Processes.ts"
export {
  type ExecOptions,
  type ExecResult,
  type ListSandboxesOptions,
  Sandbox,
  type SandboxState
} from "./Sandboxes.ts"
export type { LogsOptions, MetricsOptions } from "./SandboxTelemetry.ts"
export type { CreateTemplateInput } from "./Templates.ts"
export { Terminal, type TerminalOptions } from "./Terminal.ts"
export type * from "./Types.ts"

/**
 * The client: `new Svc({ baseUrl, apiKey })`, each defaulting to `SVC_API_URL` (else
 * http://127.0.0.1:8080) and `SVC_API_KEY`.
 */
export class Svc {
  readonly #http: Http
  readonly sandboxes: Sandboxes
  readonly templates: Templates
  readonly volumes: Volumes
  readonly apps: Apps
  readonly secrets: Secrets
  readonly webhooks: Webhooks
  readonly keys: Keys
  /** The org's record: `get()`, `update({ name })`. */
  readonly org: OrgResource
  /** The org's audit log: `list({ action, limit, offset })`. */
  readonly audit: Audit
  /** Spend and limits: `usage()`, `setLimits({ hard_limit_micros, alert_micros })`. */
  readonly billing: Billing
  /** The platform's worker processes: `list()`. */
  readonly workers: Workers

  constructor(options: SvcOptions = {}) {
    this.#http = new Http(options)
    this.templates = new Templates(this.#http)
    this.sandboxes = new Sandboxes(this.#http, this.templates)
    this.volumes = new Volumes(this.#http)
    this.apps = new Apps(this.#http)
    this.secrets = new Secrets(this.#http)
    this.webhooks = new Webhooks(this.#http)
    this.keys = new Keys(this.#http)
    this.org = new OrgResource(this.#http)
    this.audit = new Audit(this.#http)
    this.billing = new Billing(this.#http)
    this.workers = new Workers(this.#http)
  }

  get baseUrl(): string {
    return this.#http.baseUrl
  }

  /** The org's events as they happen (see `EventStream`). */
  events(options: EventsOptions = {}): EventStream {
    return new EventStream(this.#http, options)
  }

  /** Who the key is: its org, scopes, user (any valid key). */
  whoami(): Promise<T.WhoAmI> {
    return this.#http.json("GET", "/v1/auth/me")
  }

  /** The API's health (no key needed, but sent). */
  health(): Promise<{ readonly status: "ok"; readonly postgres: "up" | "down"; readonly nats: "up" | "down" }> {
    return this.#http.json("GET", "/v1/health")
  }
}
