/**
 * The client for Effect programs: derived from the server's own HttpApi definition
 * (`@svc/domain/Api`), so every route, payload, query, success and error schema is the one the
 * server implements. Requests are encoded and answers decoded with those schemas; an API error
 * fails with its typed class (`NotFound`, `Conflict`, `InvalidRequest`...), matched with
 * `Effect.catchTag`.
 *
 *   const program = Effect.gen(function*() {
 *     const svc = yield* SvcClient
 *     const sandbox = yield* svc.sandboxes.create({ payload: { name: "demo" } })
 *   })
 *   program.pipe(Effect.provide(SvcClient.layer({ baseUrl, apiKey })))
 */
import { Api } from "@svc/domain/Api"
import { Config, Context, Effect, Layer, Option, Redacted } from "effect"
import { FetchHttpClient, HttpClient, HttpClientRequest } from "effect/http"
import { HttpApiClient } from "effect/http-api"
import * as SdkConfig from "./Config.ts"

export { Api }
export * as Errors from "@svc/domain/Errors"
// The request bodies are the server's schema classes: a payload is an instance
// (`new ExecBody({ cmd, timeout_ms })`), every field given (the server's defaults apply to JSON only).
export { CreateAppBody, UpdateAppBody } from "@svc/domain/Api/Apps"
export { CreateApiKeyRequest } from "@svc/domain/Api/Auth"
export { UpdateOrgRequest } from "@svc/domain/Api/Org"
export { PreviewTokenRequest } from "@svc/domain/Api/Previews"
export { SignalBody, StartProcessBody } from "@svc/domain/Api/Processes"
export { BindSecretBody, CreateSandboxBody, ExecBody, NetworkPolicyBody } from "@svc/domain/Api/Sandboxes"
export { CreateSecretBody, PatchSecretBody, RotateSecretBody } from "@svc/domain/Api/Secrets"
export { CreateTemplateBody, SnapshotBody } from "@svc/domain/Api/Templates"
export { CreateVolumeBody } from "@svc/domain/Api/Volumes"
export { CreateWebhookBody, PatchWebhookBody } from "@svc/domain/Api/Webhooks"

export { DEFAULT_BASE_URL } from "./Config.ts"

export interface SvcClientOptions {
  /** The API's address, e.g. `http://127.0.0.1:8080` (no `/v1`). */
  readonly baseUrl: string
  /** A key (`svc_live_...`). */
  readonly apiKey: string | Redacted.Redacted<string>
}

/** Every route of the /v1 API as a method: `client.<group>.<endpoint>({ params, query, payload, headers })`. */
export type SvcApiClient = HttpApiClient.ForApi<typeof Api>

const make = (options: SvcClientOptions) =>
  HttpApiClient.make(Api, {
    baseUrl: options.baseUrl.replace(/\/+$/, ""),
    transformClient: HttpClient.mapRequest(
      HttpClientRequest.bearerToken(
        typeof options.apiKey === "string" ? options.apiKey : Redacted.value(options.apiKey)
      )
    )
  })

/** `SVC_API_URL` (default http://127.0.0.1:8080) and `SVC_API_KEY`. */
export const SvcClientConfig: Config.Config<SvcClientOptions> = Config.all({
  baseUrl: SdkConfig.ApiUrl.pipe(Config.map(Option.getOrElse(() => SdkConfig.DEFAULT_BASE_URL))),
  apiKey: SdkConfig.RequiredApiKey
})

export class SvcClient extends Context.Service<SvcClient, SvcApiClient>()("@svc/sdk/SvcClient") {
  /** A client over the platform's `fetch`. */
  static readonly layer = (options: SvcClientOptions): Layer.Layer<SvcClient> =>
    Layer.effect(SvcClient, make(options)).pipe(Layer.provide(FetchHttpClient.layer))

  /** A client over the `HttpClient` you provide (a custom fetch, retries, tracing...). */
  static readonly layerWithoutHttpClient = (options: SvcClientOptions): Layer.Layer<
    SvcClient,
    never,
    HttpClient.HttpClient
  > => Layer.effect(SvcClient, make(options))

  /** From `SVC_API_URL` and `SVC_API_KEY` (or whatever `ConfigProvider` is installed). */
  static readonly layerConfig: Layer.Layer<SvcClient, Config.ConfigError> = Layer.effect(
    SvcClient,
    Effect.flatMap(SvcClientConfig, make)
  ).pipe(Layer.provide(FetchHttpClient.layer))
}

/** The key of `SVC_API_KEY`, if set: for callers that fall back to something else. */
export const apiKeyFromEnv: Effect.Effect<Option.Option<Redacted.Redacted<string>>, Config.ConfigError> =
  SdkConfig.ApiKey
