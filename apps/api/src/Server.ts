/**
 * The API role: the HttpApi implementation, /v1/openapi.json, /docs, the dashboard at / and the
 * shared middleware on a Node HTTP server, this process's worker heartbeat, the keys that seal secrets at rest
 * (SVC_ENCRYPTION_KEYS), and its Postgres (DATABASE_URL, migrated) and NATS (NATS_URL,
 * SVC_NATS_PREFIX) connections. `layer` is the whole role: what `node apps/api/src/main.ts`,
 * `svc api` and `svc dev` run. Its own settings: SVC_HOST and SVC_PORT here, the others where
 * the handlers read them (auth, rate limits, quotas, transfers).
 *
 * Start-up and stop, in order: every route and the services behind it are built before the
 * port opens (a request before then is refused at once, never held); a stop closes the port,
 * lets requests in flight finish (20 s at most) while each answer closes its connection, and
 * only then releases the services. A request the app cannot take gets 503 `unavailable`.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Nats } from "@svc/bus/Nats"
import { WorkerHeartbeat } from "@svc/bus/Workers"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Database from "@svc/db/Database"
import { Api } from "@svc/domain/Api"
import * as Telemetry from "@svc/telemetry/Telemetry"
import { Deferred, Duration, Effect, Layer } from "effect"
import { HttpMiddleware, HttpRouter, HttpServer, HttpServerResponse } from "effect/http"
import { HttpApiBuilder, HttpApiScalar } from "effect/http-api"
import { createServer, type IncomingMessage, type Server, type ServerResponse, STATUS_CODES } from "node:http"
import type { Duplex } from "node:stream"
import { ApiHost, ApiPort } from "./Config.ts"
import { HealthMonitor } from "./Health.ts"
import { AppsHandlers } from "./Http/Apps.ts"
import { IdentityHandlers } from "./Http/Auth.ts"
import { AuthorizationLayer } from "./Http/Authorization.ts"
import { BillingHandlers } from "./Http/Billing.ts"
import { DashboardRoutes } from "./Http/Dashboard.ts"
import { InfrastructureMiddleware } from "./Http/Infrastructure.ts"
import { spanName } from "./Http/Metrics.ts"
import { ApiMiddleware, errorForStatus, newRequestId } from "./Http/Middleware.ts"
import { SandboxesHandlers } from "./Http/Sandboxes.ts"
import { SecretsHandlers } from "./Http/Secrets.ts"
import { SystemHandlers } from "./Http/System.ts"
import { TemplatesHandlers } from "./Http/Templates.ts"
import { VolumesHandlers } from "./Http/Volumes.ts"
import { WebhooksHandlers } from "./Http/Webhooks.ts"
import { NodeHooks } from "./Preview.ts"

export const Handlers = Layer.mergeAll(
  SystemHandlers,
  IdentityHandlers,
  SandboxesHandlers,
  WebhooksHandlers,
  SecretsHandlers,
  // The snapshot route reads the sandbox through the Sandboxes service SandboxesHandlers builds.
  TemplatesHandlers.pipe(Layer.provide(SandboxesHandlers)),
  VolumesHandlers,
  BillingHandlers,
  AppsHandlers
).pipe(
  Layer.provide(HealthMonitor.layer),
  Layer.provideMerge(AuthorizationLayer),
  Layer.provideMerge(InfrastructureMiddleware)
)

export const Routes = Layer.mergeAll(
  HttpApiBuilder.layer(Api, { openapiPath: "/v1/openapi.json" }).pipe(Layer.provide(Handlers)),
  HttpApiScalar.layer(Api, { path: "/docs" }),
  DashboardRoutes,
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
      `content-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${newRequestId()}\r\n` +
      `connection: close\r\n\r\n${body}`
  )
}

/**
 * Runs before the app's handler on every request. Once a stop has begun (the server no longer
 * listens), each answer closes its connection: a keep-alive client then opens a new one, which
 * is refused at once, instead of holding the stop open until its idle timeout. When the app's
 * handler is not attached (the stop removed it after its grace), the request is answered 503
 * `unavailable` here: a request is never left without an answer.
 */
const gate = (server: Server) => (_request: IncomingMessage, response: ServerResponse) => {
  if (!server.listening) response.setHeader("connection", "close")
  if (server.listenerCount("request") > 1) return
  const body = JSON.stringify(errorForStatus(503))
  response.writeHead(503, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    "x-request-id": newRequestId(),
    connection: "close"
  }).end(body)
}

/**
 * The Node HTTP server the API runs on. With `hooks`, a preview request (a `Host` of the
 * preview domain, `Preview.ts`) is answered by the preview proxy and never reaches the app.
 */
export const makeNodeServer = (hooks?: NodeHooks["Service"]) => {
  const server = createServer()
  if (hooks !== undefined) {
    const emit = server.emit.bind(server)
    server.emit = ((event: string, ...args: Array<any>) => {
      const preview = hooks.preview
      if (preview !== undefined && server.listening) {
        if (event === "request" && preview.request(args[0], args[1])) return true
        if (event === "upgrade" && preview.upgrade(args[0], args[1], args[2])) return true
      }
      return emit(event, ...args)
    }) as typeof server.emit
  }
  return server.on("clientError", onClientError).on("request", gate(server))
}

/**
 * How long a stop waits for requests in flight; one still running then is ended with 503
 * `unavailable` (and its connection closes).
 */
export const GRACEFUL_SHUTDOWN = Duration.seconds(20)

const unavailable = Effect.sync(() =>
  HttpServerResponse.jsonUnsafe(errorForStatus(503), { status: 503, headers: { "x-request-id": newRequestId() } })
)

/**
 * `routes` served on a given address, in order. The routes are built first and the port opened
 * after (`HttpRouter.serve` opens it first and attaches the handler once every route's services
 * are up: a request that came in between was never answered). A stop closes the port, lets
 * requests in flight finish for `gracefulShutdown` and answers those still running 503.
 */
export const serveInOrder = <E, R>(
  routes: Layer.Layer<never, E, R>,
  options: { readonly port: number; readonly host: string; readonly gracefulShutdown?: Duration.Input }
) => {
  const grace = Duration.fromInputUnsafe(options.gracefulShutdown ?? GRACEFUL_SHUTDOWN)
  return Layer.unwrap(
    Effect.gen(function*() {
      const hooks: NodeHooks["Service"] = { preview: undefined }
      const app = yield* HttpRouter.toHttpEffect(Layer.provide(routes, Layer.succeed(NodeHooks, hooks)))
      const deadline = yield* Deferred.make<void>()
      const served = HttpServer.serve(Effect.raceFirst(app, Effect.andThen(Deferred.await(deadline), unavailable)))
        .pipe(
          // Request spans named by route template (`POST /v1/sandboxes/:id/exec`), not by method alone.
          Layer.provide(Layer.succeed(HttpMiddleware.SpanNameGenerator, spanName)),
          Layer.provide(NodeHttpServer.layerServer(() => makeNodeServer(hooks), {
            port: options.port,
            host: options.host,
            // The server's own limit comes after ours, which has answered what was left by then.
            gracefulShutdownTimeout: Duration.sum(grace, Duration.seconds(5))
          }))
        )
      // Built after the server, so released before it: the countdown starts as the stop begins.
      const countdown = Layer.effectDiscard(Effect.addFinalizer(() =>
        Effect.sync(() => {
          setTimeout(() => Deferred.doneUnsafe(deadline, Effect.void), Duration.toMillis(grace)).unref()
        })
      ))
      return Layer.provide(countdown, served)
    })
  ).pipe(Layer.provide(NodeHttpServer.layerHttpServices))
}

/** The API on a given address; needs the platform's services (SqlClient, Nats, SecretBox, ...). */
export const layerOn = (options: { readonly port: number; readonly host: string }) => serveInOrder(Routes, options)

/** The HTTP API on `SVC_HOST:SVC_PORT` (default 127.0.0.1:8080); needs the platform's services. */
export const httpLayer = Layer.unwrap(
  Effect.gen(function*() {
    const port = yield* ApiPort
    const host = yield* ApiHost
    return layerOn({ port, host })
  })
)

/** The whole API role, configured from the environment. */
export const layer = Layer.mergeAll(httpLayer, WorkerHeartbeat.layer("api")).pipe(
  Layer.provide(SecretBox.layer),
  Layer.provide(Layer.mergeAll(Database.layer, Nats.layer)),
  // Traces, logs and /metrics of the role (svc-api), for everything above.
  Layer.provide(Telemetry.layer("svc-api"))
)
