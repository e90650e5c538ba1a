/**
 * The HTTP API process: the HttpApi implementation, /v1/openapi.json, /docs, the shared
 * middleware, on a Node HTTP server that finishes requests in flight when it stops.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Api } from "@svc/domain/Api"
import { Duration, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { HttpApiBuilder, HttpApiScalar } from "effect/http-api"
import { randomBytes } from "node:crypto"
import { createServer, STATUS_CODES } from "node:http"
import type { Duplex } from "node:stream"
import { ApiHost, ApiPort } from "./Config.ts"
import { HealthMonitor } from "./Health.ts"
import { IdentityHandlers } from "./Http/Auth.ts"
import { AuthorizationLayer } from "./Http/Authorization.ts"
import { InfrastructureMiddleware } from "./Http/Infrastructure.ts"
import { ApiMiddleware, errorForStatus } from "./Http/Middleware.ts"
import { SandboxesHandlers } from "./Http/Sandboxes.ts"
import { SystemHandlers } from "./Http/System.ts"
import { WebhooksHandlers } from "./Http/Webhooks.ts"

export const Handlers = Layer.mergeAll(SystemHandlers, IdentityHandlers, SandboxesHandlers, WebhooksHandlers).pipe(
  Layer.provide(HealthMonitor.layer),
  Layer.provideMerge(AuthorizationLayer),
  Layer.provideMerge(InfrastructureMiddleware)
)

export const Routes = Layer.mergeAll(
  HttpApiBuilder.layer(Api, { openapiPath: "/v1/openapi.json" }).pipe(Layer.provide(Handlers)),
  HttpApiScalar.layer(Api, { path: "/docs" }),
  ApiMiddleware
)

/**
 * Node answers requests it cannot parse (a malformed request line or header, headers over its
 * limit, a request that never finished arriving) itself, before any route: with the contract's
 * `{error, code}` body here instead of an empty one.
 */
const onClientError = (error: Error & { readonly code?: string }, socket: Duplex) => {
  if (error.code === "ECONNRESET" || !socket.writable) return
  const status = error.code === "HPE_HEADER_OVERFLOW"
    ? 431
    : error.code === "HPE_CHUNK_EXTENSIONS_OVERFLOW"
    ? 413
    : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
    ? 408
    : 400
  const body = JSON.stringify(errorForStatus(status))
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json; charset=utf-8\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nx-request-id: req_${randomBytes(8).toString("hex")}\r\n` +
      `connection: close\r\n\r\n${body}`
  )
}

/** The Node HTTP server the API runs on. */
export const makeNodeServer = () => createServer().on("clientError", onClientError)

/** The API on a given address; needs the platform's services (SqlClient, Nats, SecretBox, ...). */
export const layerOn = (options: { readonly port: number; readonly host: string }) =>
  HttpRouter.serve(Routes, { disableListenLog: true, disableLogger: true }).pipe(
    Layer.provide(NodeHttpServer.layer(makeNodeServer, {
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
