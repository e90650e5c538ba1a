/** `svc.templates`: root file systems built from steps, their build logs, waiting for a build. */
import { waitThrough } from "./Events.ts"
import {
  chunks,
  DEFAULT_WAIT_MS,
  type Http,
  type ListOptions,
  type Page,
  segment,
  SvcError,
  type WaitOptions
} from "./Http.ts"
import type * as T from "./Types.ts"

export class Templates {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }

  /**
   * Builds a template from steps; resolves once `ready` (a SvcError `template_failed` if the
   * build fails) unless `{ wait: false }` (then `building` at once).
   */
  async create(params: T.CreateTemplateParams, options: WaitOptions<T.Template> = {}): Promise<T.Template> {
    const template: T.Template = await this.#http.json("POST", "/v1/templates", { json: params })
    return options.wait === false ? template : this.waitFor(template.id, options)
  }
  list(options: ListOptions = {}): Promise<Page<"rows", T.Template>> {
    return this.#http.json("GET", "/v1/templates", { query: { ...options } })
  }
  /** By id or name. */
  get(idOrName: string): Promise<T.Template> {
    return this.#http.json("GET", `/v1/templates/${segment(idOrName)}`)
  }
  /**
   * Sets its warm pool: `pool_size` (0 to 50) sandboxes kept booted and handed out on create, so
   * that a create is as fast as from `base`; 0 drains it.
   */
  update(idOrName: string, params: T.UpdateTemplateParams): Promise<T.Template> {
    return this.#http.json("PATCH", `/v1/templates/${segment(idOrName)}`, { json: params })
  }
  /** Refused (409) while a sandbox uses it. */
  delete(idOrName: string): Promise<T.Template> {
    return this.#http.json("DELETE", `/v1/templates/${segment(idOrName)}`)
  }
  /** The build log so far. */
  async logs(idOrName: string): Promise<string> {
    return (await this.#http.request("GET", `/v1/templates/${segment(idOrName)}/logs`)).text()
  }
  /** The build log as it is written, until the build ends. */
  async *followLogs(idOrName: string): AsyncGenerator<string> {
    const response = await this.#http.request("GET", `/v1/templates/${segment(idOrName)}/logs`, {
      query: { follow: "true" }
    })
    const decoder = new TextDecoder()
    for await (const chunk of chunks(response)) yield decoder.decode(chunk, { stream: true })
    const rest = decoder.decode()
    if (rest !== "") yield rest
  }
  /**
   * Resolves once the build ended `ready`; `failed` is a SvcError `template_failed`. Follows
   * `template.state_updated` (polling when the key may not read events).
   */
  async waitFor(
    idOrName: string,
    options: {
      readonly timeoutMs?: number | undefined
      readonly onProgress?: ((template: T.Template) => void) | undefined
    } = {}
  ): Promise<T.Template> {
    let templateId: string | undefined
    const template = await waitThrough(this.#http, {
      events: ["template.state_updated"],
      concerns: (event) => templateId === undefined || event.data["template_id"] === templateId,
      read: async () => {
        const t = await this.get(idOrName)
        templateId = t.id
        return t
      },
      done: (t) => t.state !== "building",
      timeoutMs: options.timeoutMs ?? DEFAULT_WAIT_MS,
      what: `template ${idOrName} is still building`,
      onProgress: options.onProgress
    })
    if (template.state === "failed") {
      throw new SvcError({
        status: 0,
        code: "template_failed",
        message: `template ${template.name} failed: ${template.errorMessage ?? "no message"}`,
        details: { template }
      })
    }
    return template
  }
}
