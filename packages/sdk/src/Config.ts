/**
 * The SDK's settings: where the API is and the key to use, for clients made from the
 * environment (`SvcClient.layerConfig`). The CLI reads the same two (apps/cli/src/Config.ts).
 */
import { Config } from "effect"

export const API_URL_VARIABLE = "SVC_API_URL"
export const API_KEY_VARIABLE = "SVC_API_KEY"

/** Where the API is when neither the options nor `SVC_API_URL` say. */
export const DEFAULT_BASE_URL = "http://127.0.0.1:8080"

export const ApiUrl = Config.option(Config.String(API_URL_VARIABLE))
/** The key, when set. */
export const ApiKey = Config.option(Config.Redacted(API_KEY_VARIABLE))
/** The key, required. */
export const RequiredApiKey = Config.Redacted(API_KEY_VARIABLE)
