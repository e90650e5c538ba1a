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
import { Context, Duration, Effect, Layer } from "effect"
import { HttpMiddleware, HttpRouter, HttpServer } from "effect/http"
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
import { ForksHandlers } from "./Http/Forks.ts"
import { InfrastructureMiddleware } from "./Http/Infrastructure.ts"
import { McpRoutes } from "./Http/Mcp.ts"
import { spanName } from "./Http/Metrics.ts"
import { ApiMiddleware, errorForStatus, newRequestId } from "./Http/Middleware.ts"
import { SandboxesHandlers } from "./Http/Sandboxes.ts"
import { SandboxTelemetryHandlers } from "./Http/SandboxTelemetry.ts"
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
  AppsHandlers,
  // The sandbox's log and metrics read the sandbox through the Sandboxes service as the snapshot route.
  SandboxTelemetryHandlers.pipe(Layer.provide(SandboxesHandlers)),
  // The fork route reads the source through the Sandboxes service SandboxesHandlers builds.
  ForksHandlers.pipe(Layer.provide(SandboxesHandlers))
).pipe(
  Layer.provide(HealthMonitor.layer),
  Layer.provideMerge(AuthorizationLayer),
  Layer.provideMerge(InfrastructureMiddleware)
)

export const Routes = Layer.mergeAll(
  HttpApiBuilder.layer(Api, { openapiPath: "/v1/openapi.json" }).pipe(Layer.provide(Handlers)),
  HttpApiScalar.layer(Api, { path: "/docs" }),
  DashboardRoutes,
  McpRoutes,
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

/** The response a connection is answering now: what a stop's deadline ends with 503 (`serveInOrder`). */
const ANSWERING = Symbol("svc.answering")
type Tracked = Duplex & { [ANSWERING]?: ServerResponse }

/** The contract's 503 `unavailable`, on a connection that then closes. */
const answerUnavailable = (response: ServerResponse) => {
  const body = JSON.stringify(errorForStatus(503))
  response.writeHead(503, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    "x-request-id": newRequestId(),
    connection: "close"
  }).end(body)
}

/** The connections of each server made here, for the stop's deadline. */
const connections = new WeakMap<Server, Set<Tracked>>()

/**
 * The Node HTTP server the API runs on. With `hooks`, a preview request (a `Host` of the
 * preview domain, `Preview.ts`) is answered by the preview proxy and never reaches the app.
 *
 * Every request passes here before the app's handler: once a stop has begun (the server no
 * longer listens), each answer closes its connection, so that a keep-alive client opens a new
 * one, which is refused at once, instead of holding the stop open until its idle timeout. When
 * the app's handler is not attached (the stop removed it after its grace), the request is
 * answered 503 `unavailable` here: a request is never left without an answer. All of it is one
 * `emit` override with no listener and no allocation of its own per request (bench/api.ts).
 */
export const makeNodeServer = (hooks?: NodeHooks["Service"]) => {
  const server = createServer()
  const open = new Set<Tracked>()
  connections.set(server, open)
  const emit: (this: Server, ...args: Array<any>) => boolean = server.emit
  server.emit = function(this: Server, event: string, a?: any, b?: any, c?: any) {
    if (event === "request") {
      const request = a as IncomingMessage
      const response = b as ServerResponse
      if (server.listening) {
        if (hooks?.preview !== undefined && hooks.preview.request(request, response)) return true
      } else {
        response.setHeader("connection", "close")
      }
      if (server.listenerCount("request") === 0) {
        answerUnavailable(response)
        return true
      }
      ;(request.socket as Tracked)[ANSWERING] = response
      return emit.call(this, event, request, response)
    }
    if (event === "upgrade" && server.listening && hooks?.preview !== undefined && hooks.preview.upgrade(a, b, c)) {
      return true
    }
    // oxlint-disable-next-line prefer-rest-params -- every other event as it came, without copying its arguments
    return emit.apply(this, arguments as any)
  } as typeof server.emit
  return server.on("clientError", onClientError).on("connection", (socket: Tracked) => {
    open.add(socket)
    socket.once("close", () => open.delete(socket))
  })
}

/** Ends with 503 `unavailable` what `server`'s connections are still answering (`makeNodeServer`). */
const endInFlight = (server: Server) => {
  for (const socket of connections.get(server) ?? []) {
    const response = socket[ANSWERING]
    if (response === undefined || response.writableEnded) continue
    // A response already started (a stream) cannot become a 503: its connection is cut instead.
    if (response.headersSent) response.destroy()
    else answerUnavailable(response)
  }
}

/**
 * How long a stop waits for requests in flight; one still running then is ended with 503
 * `unavailable` (and its connection closes).
 */
export const GRACEFUL_SHUTDOWN = Duration.seconds(20)

/**
 * The context each request starts from (the server's handler takes it when it is attached),
 * keeping up to 32 additions as overlays before copying its map of services: a request adds
 * about ten (the server's, the router's, the middlewares'), and past `Context`'s default of 8
 * each addition copied every service (about 5 % of an authenticated GET, bench/api.ts).
 */
const deeper = <R>(context: Context.Context<R>): Context.Context<R> =>
  Context.makeUnsafe(context.mapUnsafe, { maxDepth: 32 })

/**
 * `routes` served on a given address, in order. The routes are built first and the port opened
 * after (`HttpRouter.serve` opens it first and attaches the handler once every route's services
 * are up: a request that came in between was never answered). A stop closes the port, lets
 * requests in flight finish for `gracefulShutdown` and answers those still running 503 (on the
 * Node server, not by racing every request against the deadline: that forked two fibers per
 * request; their handlers are interrupted when the server's own limit, 5 s later, ends).
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
      let server: Server | undefined
      const serve = Effect.flatMap(Effect.service(HttpServer.HttpServer), (server) => server.serve(app))
      const served = Layer.effectDiscard(
        Effect.updateContext(serve, (context: Context.Context<Effect.Services<typeof serve>>) => deeper(context))
      ).pipe(
        // Request spans named by route template (`POST /v1/sandboxes/:id/exec`), not by method alone.
        Layer.provide(Layer.succeed(HttpMiddleware.SpanNameGenerator, spanName)),
        Layer.provide(NodeHttpServer.layerServer(() => (server = makeNodeServer(hooks)), {
          port: options.port,
          host: options.host,
          // The server's own limit comes after ours, which has answered what was left by then.
          gracefulShutdownTimeout: Duration.sum(grace, Duration.seconds(5))
        }))
      )
      // Built after the server, so released before it: the countdown starts as the stop begins.
      const countdown = Layer.effectDiscard(Effect.addFinalizer(() =>
        Effect.sync(() => {
          setTimeout(() => server && endInFlight(server), Duration.toMillis(grace)).unref()
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
