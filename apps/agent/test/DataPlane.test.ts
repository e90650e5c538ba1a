/**
 * The data plane through its one definition (`@svc/host-protocol/DataPlane`), against a real
 * agent: a client derived from the definition gets every refusal as the declared error class,
 * and what the router answers outside the endpoints (unknown routes, other methods) has the
 * definition's error body.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, layer } from "@effect/vitest"
import { makeSandboxId } from "@svc/domain/Ids"
import { AgentApi, AgentInvalid, AgentNotFound, AgentUnauthorized } from "@svc/host-protocol/DataPlane"
import { Effect, Schema, Stream } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import { HttpApiClient } from "effect/http-api"
import { createRunning, http, makeHost, type RunningAgent, startAgent, testLayer } from "../testing/Agent.ts"

/** A client of the definition for this agent, sending `token` (none when undefined). */
const clientFor = (agent: RunningAgent, token: string | undefined) =>
  Effect.gen(function*() {
    const http = yield* HttpClient.HttpClient
    return yield* HttpApiClient.makeWith(AgentApi, {
      httpClient: http.pipe(
        HttpClient.mapRequest((request) =>
          token === undefined ? request : HttpClientRequest.bearerToken(request, token)
        )
      ),
      baseUrl: agent.dataPlane.endpoint
    })
  }).pipe(Effect.provide(NodeHttpClient.layerNodeHttp))

const UNAUTHORIZED = { error: "missing or wrong bearer token", reason: "unauthorized" }

layer(testLayer, { excludeTestServices: true, timeout: 120_000 })("host agent data plane", (it) => {
  it.effect("a client derived from the definition: a missing or wrong token is AgentUnauthorized on every endpoint and does nothing", () =>
    Effect.gen(function*() {
      const agent = yield* startAgent(yield* makeHost)
      const sandboxId = yield* createRunning(agent)
      const params = { id: sandboxId }

      for (const token of [undefined, "wrong", `${agent.dataPlane.token}x`, agent.dataPlane.token.slice(0, -1)]) {
        const client = yield* clientFor(agent, token)
        const refusals = [
          yield* Effect.flip(client.sandboxes.exec({ params, payload: { cmd: ["touch", "/root/exec-ran"] } })),
          yield* Effect.flip(client.sandboxes.readFile({ params, query: { path: "/etc/hostname" } })),
          yield* Effect.flip(client.sandboxes.writeFile({
            params,
            query: { path: "/root/uploaded" },
            payload: Stream.make(new TextEncoder().encode("should not land"))
          }))
        ]
        for (const refusal of refusals) {
          assert.instanceOf(refusal, AgentUnauthorized, String(refusal))
          assert.deepStrictEqual({ error: refusal.error, reason: refusal.reason }, UNAUTHORIZED)
        }
      }

      // With the token: typed results, and the refused calls above left nothing behind.
      const client = yield* clientFor(agent, agent.dataPlane.token)
      const ls = yield* client.sandboxes.exec({ params, payload: { cmd: ["ls", "-A", "/root"] } })
      assert.deepStrictEqual([ls.exit_code, ls.stdout], [0, ""])
      const missing = yield* Effect.flip(client.sandboxes.readFile({ params, query: { path: "/root/nothing" } }))
      assert.instanceOf(missing, AgentNotFound)
      assert.strictEqual(missing.error, "/root/nothing: no such file or folder")
      const unknown = yield* Effect.flip(
        client.sandboxes.exec({ params: { id: makeSandboxId() }, payload: { cmd: ["true"] } })
      )
      assert.instanceOf(unknown, AgentNotFound)
      assert.strictEqual(unknown.error, "no such sandbox on this host")
    }))

  it.effect("outside the endpoints: 401 without the token first, then an unknown route is 404 and another method 405, with the definition's error body", () =>
    Effect.gen(function*() {
      const agent = yield* startAgent(yield* makeHost)
      const decodeNotFound = Schema.decodeUnknownSync(AgentNotFound)
      const decodeInvalid = Schema.decodeUnknownSync(AgentInvalid)
      const decodeUnauthorized = Schema.decodeUnknownSync(AgentUnauthorized)

      for (const path of ["/other", "/", "/sandboxes", "/sandboxes/x/nothing", "/sandboxes/x/exec/more"]) {
        const refused = yield* http(agent, path, { token: null })
        assert.strictEqual(refused.status, 401, path)
        assert.deepStrictEqual({ ...decodeUnauthorized(refused.json) }, UNAUTHORIZED)
        const wrong = yield* http(agent, path, { token: "wrong" })
        assert.strictEqual(wrong.status, 401, path)

        const unknown = yield* http(agent, path)
        assert.strictEqual(unknown.status, 404, path)
        assert.strictEqual(unknown.contentType, "application/json")
        const body = decodeNotFound(unknown.json)
        assert.instanceOf(body, AgentNotFound)
        assert.deepStrictEqual({ ...body }, { error: "no such route", reason: "not_found" })
      }

      for (
        const [method, path, allowed] of [
          ["GET", "/sandboxes/x/exec", "use POST"],
          ["PUT", "/sandboxes/x/exec", "use POST"],
          ["DELETE", "/sandboxes/x/files?path=/x", "use GET or PUT"],
          ["POST", "/sandboxes/x/files?path=/x", "use GET or PUT"]
        ] as const
      ) {
        const other = yield* http(agent, path, { method })
        assert.strictEqual(other.status, 405, `${method} ${path}`)
        assert.deepStrictEqual({ ...decodeInvalid(other.json) }, { error: allowed, reason: "invalid" })
        assert.strictEqual((yield* http(agent, path, { method, token: null })).status, 401)
      }
    }))
})
