/**
 * What the user's commands read: the API's URL and key (the SDK's two settings) and the state
 * dir holding the dev stack's credentials. Apart from `../Config.ts` (every setting of `svc`,
 * the operator's too), so that the client, `svc --help` and the packed CLI load no server
 * package (`@svc/db`'s settings among them).
 */
import * as Env from "@svc/config/Env"
import * as SdkConfig from "@svc/sdk/Config"
import { Config } from "effect"
import * as NodePath from "node:path"

/** Relative to the working directory (`npm start` and `npm run svc` run in the repository). */
export const DEFAULT_STATE_DIR = ".svc"

export const StateDir = Env.describe(
  Config.String("SVC_STATE_DIR").pipe(
    Config.withDefault(DEFAULT_STATE_DIR),
    Config.map((dir) => NodePath.resolve(dir))
  ),
  { name: "SVC_STATE_DIR", default: "`.svc` of the working directory", format: "path" }
)

/** The API's base URL when `SVC_API_KEY` is set without it. */
export const DEFAULT_API_URL = SdkConfig.DEFAULT_BASE_URL

// The SDK's own settings, described for the README's table here.
export const ApiUrl = Env.describe(SdkConfig.ApiUrl, {
  name: SdkConfig.API_URL_VARIABLE,
  default: "`.svc/dev-credentials.json`'s, else `http://127.0.0.1:8080`",
  format: "URL"
})

export const ApiKey = Env.describe(SdkConfig.ApiKey, {
  name: SdkConfig.API_KEY_VARIABLE,
  default: "`.svc/dev-credentials.json`'s",
  format: "API key"
})
