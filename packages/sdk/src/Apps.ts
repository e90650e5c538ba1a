/** `svc.apps`: long-running deployments, `replicas` sandboxes of a template running a command (docs/contract.md#apps). */
import { waitThrough } from "./Events.ts"
import { type Http, idempotency, type ListOptions, type Page, segment, SvcError } from "./Http.ts"
import type * as T from "./Types.ts"

export class Apps {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** Answers at once (`deploying`); `waitUntilRunning` waits for the replicas. */
  create(params: T.CreateAppParams, options: { readonly idempotencyKey?: string | undefined } = {}): Promise<T.App> {
    return this.#http.json("POST", "/v1/apps", { json: params, headers: idempotency(options) })
  }
  list(options: ListOptions = {}): Promise<Page<"apps", T.App>> {
    return this.#http.json("GET", "/v1/apps", { query: { ...options } })
  }
  get(appId: string): Promise<T.App> {
    return this.#http.json("GET", `/v1/apps/${segment(appId)}`)
  }
  /** Replaces what it names; a new `cmd` or `env` rolls the replicas over one at a time. */
  update(appId: string, patch: T.UpdateAppParams): Promise<T.App> {
    return this.#http.json("PATCH", `/v1/apps/${segment(appId)}`, { json: patch })
  }
  scale(appId: string, replicas: number): Promise<T.App> {
    return this.update(appId, { replicas })
  }
  /** The app and its sandboxes go (`deleting`, then not found). */
  delete(appId: string): Promise<T.App> {
    return this.#http.json("DELETE", `/v1/apps/${segment(appId)}`)
  }
  /**
   * Resolves once every replica is ready (`running`); rejects after `timeoutMs` (default 120 s).
   * An app has no events of its own: its replicas' sandbox events wake the wait (the app is read
   * again on each), and it reads the app every second besides, since the app's record follows
   * its replicas a moment later.
   */
  async waitUntilRunning(appId: string, options: { readonly timeoutMs?: number } = {}): Promise<T.App> {
    let last: T.App | undefined
    try {
      return await waitThrough(this.#http, {
        events: ["sandbox.state_updated"],
        concerns: () => true,
        read: async () => (last = await this.get(appId)),
        done: (app) => app.state === "running",
        timeoutMs: options.timeoutMs ?? 120_000,
        what: `app ${appId} is not running`,
        idleReadMs: 1000
      })
    } catch (error) {
      if (!(error instanceof SvcError) || error.code !== "timeout" || last === undefined) throw error
      throw new SvcError({
        status: 0,
        code: "timeout",
        message: `app ${last.name} is ${last.state}: ${last.reason ?? "no reason given"}`,
        details: { app: last }
      })
    }
  }
}
