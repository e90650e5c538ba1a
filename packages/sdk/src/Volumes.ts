/** `svc.volumes`: persistent disks that sandboxes mount. */
import { type Http, idempotency, type ListOptions, type Page, segment } from "./Http.ts"
import type * as T from "./Types.ts"

export class Volumes {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  create(
    params: T.CreateVolumeParams,
    options: { readonly idempotencyKey?: string | undefined } = {}
  ): Promise<T.Volume> {
    return this.#http.json("POST", "/v1/volumes", { json: params, headers: idempotency(options) })
  }
  list(options: ListOptions = {}): Promise<Page<"volumes", T.Volume>> {
    return this.#http.json("GET", "/v1/volumes", { query: { ...options } })
  }
  get(volumeId: string): Promise<T.Volume> {
    return this.#http.json("GET", `/v1/volumes/${segment(volumeId)}`)
  }
  /** Refused (409) while a sandbox has it. */
  delete(volumeId: string): Promise<T.Volume> {
    return this.#http.json("DELETE", `/v1/volumes/${segment(volumeId)}`)
  }
}
