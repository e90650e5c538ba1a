/**
 * Prometheus metrics: every metric of the process (Effect's `Metric` registry) in the text
 * exposition format (Effect's `PrometheusMetrics`) at `GET /metrics` on
 * `SVC_METRICS_HOST:SVC_METRICS_PORT`, a listener of its own (unauthenticated: bind it where
 * only the scraper reaches it; loopback by default). Unset port: no listener.
 *
 * Counters and histograms are updated where things happen (the API's requests, the actor
 * runtime's messages, the dispatcher's deliveries). Gauges of state held elsewhere (sandboxes by
 * state in Postgres, consumers' pending messages in JetStream) are read when Prometheus scrapes:
 * a role registers a `collector`, and a scrape runs every collector (at most `COLLECT_TIMEOUT`,
 * a failing one only logs) before rendering. Nothing is read between scrapes.
 */
import { Duration, Effect, Layer, Option } from "effect"
import { PrometheusMetrics } from "effect/observability"
import * as Http from "node:http"
import type * as Net from "node:net"
import { MetricsHost, MetricsPort } from "./Config.ts"

export const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

/** How long a scrape waits for the collectors. */
export const COLLECT_TIMEOUT = Duration.seconds(5)

const collectors = new Map<number, { readonly name: string; readonly collect: Effect.Effect<void> }>()
let nextCollector = 0

/**
 * Registers `collect` (run at each scrape, with the services the layer was built with) for as
 * long as the layer lives.
 */
export const collector = <E, R>(name: string, collect: Effect.Effect<void, E, R>): Layer.Layer<never, never, R> =>
  Layer.effectDiscard(Effect.gen(function*() {
    const context = yield* Effect.context<R>()
    const id = nextCollector++
    const provided = collect.pipe(
      Effect.provideContext(context),
      Effect.catchCause((cause) => Effect.logWarning("metrics: a collector failed", { collector: name, cause }))
    )
    yield* Effect.acquireRelease(
      Effect.sync(() => collectors.set(id, { name, collect: provided })),
      () => Effect.sync(() => collectors.delete(id))
    )
  }))

/** Runs every collector, then renders the registry. */
export const scrape: Effect.Effect<string> = Effect.gen(function*() {
  yield* Effect.forEach([...collectors.values()], (c) => c.collect, { concurrency: "unbounded", discard: true }).pipe(
    Effect.timeoutOption(COLLECT_TIMEOUT)
  )
  return yield* PrometheusMetrics.format()
}).pipe(Effect.withTracerEnabled(false))

/** A `/metrics` listener on a given address; `port` 0 picks a free one (`address` says which). */
export const serve = (options: { readonly host: string; readonly port: number }) =>
  Effect.gen(function*() {
    const context = yield* Effect.context<never>()
    const server = Http.createServer((request, response) => {
      const path = (request.url ?? "/").split("?")[0]
      if (path !== "/metrics") {
        response.writeHead(404, { "content-type": "text/plain" }).end("not found: try /metrics\n")
        return
      }
      if (request.method !== "GET" && request.method !== "HEAD") {
        response.writeHead(405, { allow: "GET, HEAD" }).end()
        return
      }
      Effect.runPromiseWith(context)(scrape).then(
        (body) => response.writeHead(200, { "content-type": CONTENT_TYPE }).end(request.method === "HEAD" ? "" : body),
        () => response.writeHead(500).end()
      )
    })
    yield* Effect.acquireRelease(
      Effect.callback<void, Error>((resume) => {
        server.once("error", (error) => resume(Effect.fail(error)))
        server.listen(options.port, options.host, () => resume(Effect.void))
      }),
      () =>
        Effect.callback<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    ).pipe(Effect.orDie)
    const address = server.address() as Net.AddressInfo
    return { port: address.port, url: `http://${options.host}:${address.port}/metrics` }
  })

/**
 * The listener of `SVC_METRICS_PORT` (none when unset). One value for every role: `svc dev`
 * (the four roles in one process) builds it once and serves all of their metrics.
 */
export const layer = Layer.effectDiscard(Effect.gen(function*() {
  const port = yield* MetricsPort
  const host = yield* MetricsHost
  if (Option.isNone(port)) return
  const served = yield* serve({ host, port: port.value })
  yield* Effect.logInfo("metrics: serving", { url: served.url })
}))
