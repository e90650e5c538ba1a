// The error classes inside a real HttpApi: statuses, wire bodies and client decoding.
import { assert, describe, expect, it, layer } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { HttpServer } from "effect/http"
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup, HttpApiTest, OpenApi } from "effect/http-api"
import * as E from "../src/Errors.ts"

const samples = {
  not_found: new E.NotFound({ error: "No such sandbox" }),
  volume: new E.VolumeCapacityAboveMax({ requested_gib: 2048, max_gib: 1024 }),
  scope: new E.InvalidScope(),
  insufficient: new E.InsufficientScope({ required_scope: "apps:write" }),
  rate: new E.RateLimited({ retry_after_s: 2 })
} as const

class Probe extends HttpApiGroup.make("probe").add(
  HttpApiEndpoint.get("fail", "/fail/:which", {
    params: { which: Schema.Literals(["not_found", "volume", "scope", "insufficient", "rate"]) },
    success: Schema.String,
    error: [E.NotFound, E.VolumeCapacityAboveMax, E.InvalidScope, E.InsufficientScope, E.RateLimited]
  })
) {}
class Api extends HttpApi.make("probe-api").add(Probe) {}

const ProbeLive = HttpApiBuilder.group(
  Api,
  "probe",
  (handlers) => handlers.handle("fail", ({ params }) => Effect.fail(samples[params.which]))
)

describe("Errors in HttpApi", () => {
  layer(Layer.mergeAll(ProbeLive, HttpServer.layerServices))("client round trip", (it) => {
    it.effect("each error comes back as its own class, details intact", () =>
      Effect.gen(function*() {
        const client = yield* HttpApiTest.groups(Api, ["probe"])
        for (const which of Object.keys(samples) as Array<keyof typeof samples>) {
          const error = yield* client.probe.fail({ params: { which } }).pipe(Effect.flip)
          const sample = samples[which]
          assert.strictEqual(error.constructor, sample.constructor, which)
          expect(Schema.encodeSync(E.ApiError)(error as E.ApiError)).toEqual(Schema.encodeSync(E.ApiError)(sample))
        }
      }))
  })

  it("lists each error under its status in the OpenAPI document", () => {
    const spec = OpenApi.fromApi(Api)
    const responses = Object.values(spec.paths)[0]?.get?.responses ?? {}
    expect(Object.keys(responses).sort()).toEqual(["200", "400", "403", "404", "429"])
  })
})
