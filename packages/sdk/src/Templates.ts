/** `svc.templates`: root file systems built from steps, their build logs, waiting for a build. */
import { tarGzFolder, toBase64 } from "./Archive.ts"
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

/**
 * What `create` takes: the API's body, but `context` as a local folder's path (packed by the SDK
 * as a tar.gz, Node only) or the tar.gz's bytes; the SDK sends it base64 as the API wants.
 */
export type CreateTemplateInput = Omit<T.CreateTemplateParams, "context"> & {
  readonly context?: string | Uint8Array | undefined
}

/** A Dockerfile's context as the API takes it: base64 of a tar.gz. */
const encodeContext = async (context: string | Uint8Array): Promise<string> =>
  toBase64(typeof context === "string" ? await tarGzFolder(context) : context)

export class Templates {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }

  /**
   * Builds a template from steps on `base`, from an OCI `image` (with `registry_secret` for a
   * private registry) or from a `dockerfile` with its `context` (a local folder, packed here) and
   * `build_args`; resolves once `ready` (a SvcError `template_failed` if the build fails) unless
   * `{ wait: false }` (then `building` at once).
   */
  async create(params: CreateTemplateInput, options: WaitOptions<T.Template> = {}): Promise<T.Template> {
    const { context, ...rest } = params
    const body: T.CreateTemplateParams = context === undefined
      ? rest
      : { ...rest, context: await encodeContext(context) }
    const template: T.Template = await this.#http.json("POST", "/v1/templates", { json: body })
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
