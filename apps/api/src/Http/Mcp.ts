/**
 * `POST /mcp` (docs/contract.md#mcp): the MCP tools (`@svc/mcp`) over the Streamable HTTP
 * transport, stateless: each request is its own MCP server and transport, answered with JSON.
 *
 * The bearer key is checked here as the API's authorization checks it (the same `ApiKeys` cache
 * and verification, a failure counted against the client's address); then each tool calls this
 * same server's /v1 routes with that key through the SDK, so the key's scopes apply to each tool
 * and a revoked key is refused at the next call (nothing is kept between requests).
 */
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js"
import { ApiKeys } from "@svc/auth/ApiKeys"
import { rateKey } from "@svc/auth/ClientAddress"
import { RateLimiter } from "@svc/auth/RateLimit"
import * as Errors from "@svc/domain/Errors"
import { makeServer } from "@svc/mcp"
import { Clock, Effect, Layer, Option, Result } from "effect"
import { HttpRouter, HttpServer, HttpServerRequest, HttpServerResponse } from "effect/http"
import { AuthorizationLayer, BEARER, refuse, UNAUTHENTICATED } from "./Authorization.ts"
import { errorForStatus, renderCause } from "./Middleware.ts"

export const MCP_PATH = "/mcp"

/** This server's own address, for the tools' calls: a wildcard address is reached on loopback. */
const selfUrl = (address: HttpServer.HttpServer["Service"]["address"]) => {
  const url = new URL(HttpServer.formatAddress(address))
  if (url.hostname === "0.0.0.0") url.hostname = "127.0.0.1"
  if (url.hostname === "[::]") url.hostname = "[::1]"
  return url.origin
}

export const McpRoutes = HttpRouter.use(Effect.fnUntraced(function*(router) {
  const keys = yield* ApiKeys
  const limiter = yield* RateLimiter
  const clock = yield* Clock.Clock

  const handler = Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const now = clock.currentTimeMillisUnsafe()
    const addressKey = rateKey(Option.getOrUndefined(request.remoteAddress))
    const unauthenticated = () => {
      limiter.failed(addressKey, now)
      return refuse(UNAUTHENTICATED)
    }
    const match = BEARER.exec(request.headers["authorization"] ?? "")
    if (match === null) return unauthenticated()
    const token = match[1]!
    if (keys.cached(token, now) === undefined) {
      const wait = limiter.failuresBlock(addressKey, now)
      if (wait !== undefined) return refuse(new Errors.RateLimited({ retry_after_s: wait }))
      const verified = yield* Effect.result(keys.verify(token))
      if (Result.isFailure(verified)) {
        if (verified.failure._tag === "Unauthenticated") return unauthenticated()
        return yield* renderCause(verified.failure as never)
      }
    }
    const server = yield* Effect.serviceOption(HttpServer.HttpServer)
    if (Option.isNone(server)) return yield* Effect.die(new Error("POST /mcp served without an HttpServer"))
    const body = yield* request.text
    const web = new Request(`http://mcp${MCP_PATH}`, {
      method: "POST",
      headers: request.headers as Record<string, string>,
      body
    })
    const response = yield* Effect.promise(async () => {
      // No session id: stateless.
      const transport = new WebStandardStreamableHTTPServerTransport({ enableJsonResponse: true })
      const mcp = makeServer({ apiUrl: selfUrl(server.value.address), apiKey: token })
      await mcp.connect(transport)
      try {
        const answer = await transport.handleRequest(web)
        // The JSON answer is complete once handleRequest resolves: read it before closing.
        return new Response(await answer.arrayBuffer(), { status: answer.status, headers: answer.headers })
      } finally {
        await mcp.close()
      }
    })
    return HttpServerResponse.fromWeb(response)
  })
  yield* router.add("POST", MCP_PATH, handler)
  // Stateless: no stream to open with GET, no session to end with DELETE (the transport's 405).
  const notAllowed = Effect.succeed(
    HttpServerResponse.jsonUnsafe(errorForStatus(405), { status: 405, headers: { allow: "POST" } })
  )
  yield* router.add("GET", MCP_PATH, notAllowed)
  yield* router.add("DELETE", MCP_PATH, notAllowed)
})).pipe(Layer.provide(AuthorizationLayer))
