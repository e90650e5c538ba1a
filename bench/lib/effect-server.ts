/**
 * The framework's floor, in a process of its own: Effect's HttpRouter on NodeHttpServer answering
 * the same small JSON body as the raw baseline, with nothing of ours in the path. The API can be
 * no faster than this; the gap between this and raw node:http is the framework's, the gap
 * between this and the API is ours. Prints its port on stdout once listening.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import { HttpRouter, HttpServer, HttpServerResponse } from "effect/http"
import * as http from "node:http"

const routes = HttpRouter.add("GET", "/", HttpServerResponse.json({ status: "ok" }))
const announce = Effect.gen(function*() {
  const server = yield* HttpServer.HttpServer
  if (server.address._tag !== "UnixPathAddress") process.stdout.write(`${server.address.port}\n`)
})
NodeRuntime.runMain(
  Layer.launch(
    HttpRouter.serve(routes, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.merge(Layer.effectDiscard(announce)),
      Layer.provide(NodeHttpServer.layer(http.createServer, { port: 0, host: "127.0.0.1" }))
    )
  )
)
