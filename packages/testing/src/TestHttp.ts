/**
 * Serving an HTTP layer (an `HttpRouter.serve(...)` app) on a free loopback port for the current
 * scope, so tests talk to it over real HTTP.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Context, Effect, Layer } from "effect"
import { HttpServer } from "effect/http"
import { createServer } from "node:http"

/** Builds `app` on a free port; yields the base URL (`http://127.0.0.1:<port>`). */
export const serve = <E, R>(app: Layer.Layer<never, E, R>) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      Layer.merge(app, HttpServer.layerServices).pipe(
        Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" }))
      )
    )
    const address = Context.get(context, HttpServer.HttpServer).address as { readonly port: number }
    return `http://127.0.0.1:${address.port}`
  })
