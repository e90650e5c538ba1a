/** `svc.keys`: the API keys of the org (a full-access key or a session manages them). */
import { type Http, type ListOptions, type Page, segment } from "./Http.ts"
import type * as T from "./Types.ts"

export class Keys {
  readonly #http: Http
  constructor(http: Http) {
    this.#http = http
  }
  /** The answer's `token` is the key, shown this once. */
  create(params: T.CreateKeyParams): Promise<T.CreatedApiKey> {
    return this.#http.json("POST", "/v1/auth/api-keys", { json: params })
  }
  /** Revoked keys included. */
  list(options: ListOptions = {}): Promise<Page<"keys", T.ApiKey>> {
    return this.#http.json("GET", "/v1/auth/api-keys", { query: { ...options } })
  }
  /** The row with `revokedAt` set; again on a revoked key, the same row. */
  revoke(keyId: string): Promise<T.ApiKey> {
    return this.#http.json("DELETE", `/v1/auth/api-keys/${segment(keyId)}`)
  }
}
