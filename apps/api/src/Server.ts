/**
 * The HTTP API process: the HttpApi implementation, /v1/openapi.json, /docs, the shared
 * middleware, on a Node HTTP server that finishes requests in flight when it stops.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Api } from "@svc/domain/Api"
import { Config, Duration, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { HttpApiBuilder, HttpApiScalar } from "effect/http-api"
import { createServer } from "node:http"
import { HealthMonitor } from "./Health.ts"
import { IdentityHandlers } from "./Http/Auth.ts"
import { AuthorizationLayer } from "./Http/Authorization.ts"
import { ApiMiddleware } from "./Http/Middleware.ts"
import { SandboxesHandlers } from "./Http/Sandboxes.ts"
import { SystemHandlers } from "./Http/System.ts"
import { WebhooksHandlers } from "./Http/Webhooks.ts"

export const ApiPort = Config.Port("SVC_PORT").pipe(Config.withDefault(8080))
export const ApiHost = Config.String("SVC_HOST").pipe(Config.withDefault("127.0.0.1"))

export const Handlers = Layer.mergeAll(SystemHandlers, IdentityHandlers, SandboxesHandlers, WebhooksHandlers).pipe(
  Layer.provide(HealthMonitor.layer),
  Layer.provideMerge(AuthorizationLayer)
)

export const Routes = Layer.mergeAll(
  HttpApiBuilder.layer(Api, { openapiPath: "/v1/openapi.json" }).pipe(Layer.provide(Handlers)),
  HttpApiScalar.layer(Api, { path: "/docs" }),
  ApiMiddleware
)

/** The API on a given address; needs the platform's services (SqlClient, Nats, SecretBox, ...). */
export const layerOn = (options: { readonly port: number; readonly host: string }) =>
  HttpRouter.serve(Routes, { disableListenLog: true, disableLogger: true }).pipe(
    Layer.provide(NodeHttpServer.layer(createServer, {
      port: options.port,
      host: options.host,
      gracefulShutdownTimeout: Duration.seconds(20)
    }))
  )

/** The API on `SVC_HOST:SVC_PORT` (default 127.0.0.1:8080). */
export const layer = Layer.unwrap(
  Effect.gen(function*() {
    const port = yield* ApiPort
    const host = yield* ApiHost
    return layerOn({ port, host })
  })
)
