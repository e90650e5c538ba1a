/** `svc.secrets`: values sandboxes use through the egress proxy, never returned by the API. */
import { type Http, idempotency, type ListOptions, type Page, segment } from "./Http.ts"
import type * as T from "./Types.ts"

export class Secrets {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** The value is sent once and never returned by the API. */
  create(
    params: T.CreateSecretParams,
    options: { readonly idempotencyKey?: string | undefined } = {}
  ): Promise<T.Secret> {
    return this.#http.json("POST", "/v1/secrets", { json: params, headers: idempotency(options) })
  }
  list(options: ListOptions = {}): Promise<Page<"secrets", T.Secret>> {
    return this.#http.json("GET", "/v1/secrets", { query: { ...options } })
  }
  get(secretId: string): Promise<T.Secret> {
    return this.#http.json("GET", `/v1/secrets/${segment(secretId)}`)
  }
  /** Replaces the value. */
  rotate(secretId: string, value: string): Promise<T.Secret> {
    return this.#http.json("PUT", `/v1/secrets/${segment(secretId)}/value`, { json: { value } })
  }
  update(secretId: string, patch: T.UpdateSecretParams): Promise<T.Secret> {
    return this.#http.json("PATCH", `/v1/secrets/${segment(secretId)}`, { json: patch })
  }
  delete(secretId: string): Promise<T.Secret> {
    return this.#http.json("DELETE", `/v1/secrets/${segment(secretId)}`)
  }
}
