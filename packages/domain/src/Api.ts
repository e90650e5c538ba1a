/**
 * The one definition of the /v1 HTTP API: the server implements it, the SDK derives its client
 * from it, and /v1/openapi.json and /docs are generated from it.
 */
import { HttpApi, OpenApi } from "effect/http-api"
import { SystemApi } from "./Api/System.ts"

export class Api extends HttpApi.make("svc")
  .add(SystemApi)
  .annotateMerge(OpenApi.annotations({
    title: "Sandbox platform API",
    version: "1"
  }))
{}
