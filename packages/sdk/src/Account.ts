/**
 * The org-level resources: `svc.org` (its name), `svc.audit` (its audit log), `svc.billing`
 * (spend and limits), `svc.workers` (the platform's worker processes). Account-level routes
 * (org, audit, billing) need a full-access key.
 */
import type { Http, ListOptions, Page } from "./Http.ts"
import type * as T from "./Types.ts"

export class OrgResource {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  get(): Promise<T.Org> {
    return this.#http.json("GET", "/v1/org")
  }
  /** Renames the org. */
  update(patch: { readonly name: string }): Promise<T.Org> {
    return this.#http.json("PATCH", "/v1/org", { json: patch })
  }
}

export interface AuditListOptions extends ListOptions {
  /** Only entries of this action (`api_key.created`, `sandbox.deleted`...). */
  readonly action?: string | undefined
}

export class Audit {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** The org's audit log, newest first. */
  list(options: AuditListOptions & Readonly<Record<string, string | number | undefined>> = {}): Promise<
    Page<"entries", T.AuditEntry>
  > {
    return this.#http.json("GET", "/v1/audit", { query: { ...options } })
  }
}

export class Billing {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** This period's spend and limits, in micros, and whether the org is blocked. */
  usage(): Promise<T.Usage> {
    return this.#http.json("GET", "/v1/billing/usage")
  }
  /** Sets (a number) or removes (`null`) the hard limit and the alert value; answers the usage. */
  setLimits(limits: T.UsageLimitsParams): Promise<T.Usage> {
    return this.#http.json("PUT", "/v1/billing/limits", { json: limits })
  }
}

export class Workers {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** The runtime's worker processes that sent a heartbeat in the last 15 s. */
  list(): Promise<{ readonly workers: ReadonlyArray<T.Worker> }> {
    return this.#http.json("GET", "/v1/workers")
  }
}
