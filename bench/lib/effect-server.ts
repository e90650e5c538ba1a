/**
 * The framework's floors, in a process of their own, answering the same small JSON body as the
 * raw baseline with nothing of ours in the path:
 *   `router`: Effect's HttpRouter on NodeHttpServer;
 *   `api`:    an HttpApi of one endpoint with a response schema, built by HttpApiBuilder (what the
 *             API's routes are made of).
 * The API can be no faster than these: the gap between raw node:http and these is the
 * framework's, the gap between these and the API is ours. Prints its port once listening.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import { HttpRouter, HttpServer, HttpServerResponse } from "effect/http"
import * as http from "node:http"
import { HelloApi } from "./Floors.ts"

const announce = Effect.gen(function*() {
  const server = yield* HttpServer.HttpServer
  if (server.address._tag !== "UnixPathAddress") process.stdout.write(`${server.address.port}\n`)
})
const serve = <E, R>(routes: Layer.Layer<never, E, R>) =>
  HttpRouter.serve(routes, { disableLogger: true, disableListenLog: true }).pipe(
    Layer.merge(Layer.effectDiscard(announce)),
    Layer.provide(NodeHttpServer.layer(http.createServer, { port: 0, host: "127.0.0.1" })),
    Layer.provide(NodeHttpServer.layerHttpServices)
  )

NodeRuntime.runMain(
  Layer.launch(
    process.argv[2] === "api"
      ? serve(HelloApi)
      : serve(HttpRouter.add("GET", "/", HttpServerResponse.json({ status: "ok" })))
  )
)
