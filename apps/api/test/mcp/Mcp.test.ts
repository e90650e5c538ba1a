/**
 * `POST /mcp`: the MCP tools over the Streamable HTTP transport, driven by the official SDK's
 * `Client` through `StreamableHTTPClientTransport` with `Authorization: Bearer <key>`, against a
 * real stack. The scenario (apps/api/testing/Mcp.ts) is the one `svc mcp` runs over stdio.
 */
import { expect, layer } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { scenario } from "@svc/api/testing/Mcp"
import { Env, EnvLayer } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"

const INITIALIZE = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "curl", version: "0" } }
}

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("POST /mcp (Streamable HTTP)", (it) => {
  it.effect(
    "the tools through the official client: create, exec, files, run code, delete; a read-only key refused as isError results, then none once revoked",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        yield* scenario(async (apiKey) => {
          const client = new Client({ name: "svc-test", version: "0.0.0" })
          await client.connect(
            new StreamableHTTPClientTransport(new URL("/mcp", env.base), {
              requestInit: { headers: { authorization: `Bearer ${apiKey}` } }
            })
          )
          return client
        }, "http_401")
      }).pipe(Effect.scoped)
  )

  it.effect("no key, another scheme or an unknown key: 401 with the contract's body, before any MCP; GET and DELETE 405", () =>
    Effect.gen(function*() {
      const env = yield* Env
      for (
        const authorization of [undefined, `Basic ${btoa("a:b")}`, "Bearer svc_live_notakey0000000000000000000000"]
      ) {
        const response = yield* Effect.promise(() =>
          fetch(new URL("/mcp", env.base), {
            method: "POST",
            headers: {
              "content-type": "application/json",
              accept: "application/json, text/event-stream",
              ...(authorization !== undefined ? { authorization } : {})
            },
            body: JSON.stringify(INITIALIZE)
          })
        )
        expect(response.status, authorization).toBe(401)
        expect(yield* Effect.promise(() => response.json())).toMatchObject({ code: "unauthenticated" })
      }
      // The key itself: the server's answer to initialize.
      const ok = yield* Effect.promise(() =>
        fetch(new URL("/mcp", env.base), {
          method: "POST",
          headers: {
            "content-type": "application/json",
            accept: "application/json, text/event-stream",
            authorization: `Bearer ${env.org.token}`
          },
          body: JSON.stringify(INITIALIZE)
        })
      )
      expect(ok.status).toBe(200)
      expect(yield* Effect.promise(() => ok.json())).toMatchObject({ id: 1, result: { serverInfo: { name: "svc" } } })
      // Stateless: no GET stream, no session to DELETE.
      for (const method of ["GET", "DELETE"]) {
        const refused = yield* Effect.promise(() =>
          fetch(new URL("/mcp", env.base), { method, headers: { authorization: `Bearer ${env.org.token}` } })
        )
        expect(refused.status, method).toBe(405)
        expect(refused.headers.get("allow")).toBe("POST")
        yield* Effect.promise(() => refused.arrayBuffer())
      }
    }))

  it.effect("/v1/openapi.json describes POST /mcp with the tools the server lists, behind the bearer key", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const document = yield* Effect.promise(() =>
        fetch(new URL("/v1/openapi.json", env.base)).then((r) => r.json() as Promise<any>)
      )
      const operation = document.paths["/mcp"]?.post
      expect(operation?.security).toEqual([{ bearer: [] }])
      expect(Object.keys(operation?.responses ?? {})).toEqual(expect.arrayContaining(["200", "401", "429"]))
      const listed = yield* Effect.promise(() =>
        fetch(new URL("/mcp", env.base), {
          method: "POST",
          headers: {
            "content-type": "application/json",
            accept: "application/json, text/event-stream",
            authorization: `Bearer ${env.org.token}`
          },
          body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list", params: {} })
        }).then((r) => r.json() as Promise<any>)
      )
      const tools: Array<string> = listed.result.tools.map((tool: { name: string }) => tool.name)
      expect(tools.length).toBeGreaterThan(0)
      const documented = [...String(operation.description).matchAll(/`([a-z_]+)`/g)].map((m) => m[1])
      expect(documented.sort()).toEqual([...tools].sort())
    }))
})
