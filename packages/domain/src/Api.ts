/**
 * The one definition of the /v1 HTTP API: the server implements it, the SDK derives its client
 * from it, and /v1/openapi.json and /docs are generated from it.
 */
import { HttpApi, OpenApi } from "effect/http-api"
import { SystemApi } from "./Api/System.ts"

export class Api extends HttpApi.make("svc")
  .add(SystemApi)
  // Report every invalid field of a request at once, not only the first.
  .annotate(HttpApi.ParseOptions, { errors: "all" })
  .annotate(HttpApi.SuccessParseOptions, {})
  .annotateMerge(OpenApi.annotations({
    title: "Sandbox platform API",
    version: "1"
  }))
{}
