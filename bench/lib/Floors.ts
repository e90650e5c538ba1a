/**
 * The framework's floor with nothing of ours: an HttpApi of one endpoint with a response schema,
 * built by HttpApiBuilder (what the API's routes are made of), answering the raw baseline's
 * small JSON body. Served over a socket by effect-server.ts, in-process by api-inprocess.ts.
 */
import { Effect, Layer, Schema } from "effect"
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup } from "effect/http-api"

const Hello = HttpApi.make("floor").add(
  HttpApiGroup.make("hello").add(
    HttpApiEndpoint.get("hello", "/", { success: Schema.Struct({ status: Schema.String }) })
  )
)

const HelloHandlers = HttpApiBuilder.group(
  Hello,
  "hello",
  (handlers) => handlers.handle("hello", () => Effect.succeed({ status: "ok" }))
)

/** The routes of the one-endpoint HttpApi. */
export const HelloApi = HttpApiBuilder.layer(Hello).pipe(Layer.provide(HelloHandlers))
