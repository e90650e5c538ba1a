/**
 * `svc mcp`: the MCP tools over stdio, driven by the official SDK's `Client` through
 * `StdioClientTransport`, which starts the installed `svc mcp` (one process per key) against a
 * real stack. The scenario is apps/api/testing/Mcp.ts (the HTTP transport runs the same one).
 */
import { layer } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { scenario } from "@svc/api/testing/Mcp"
import { Env, EnvLayer } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"
import * as Os from "node:os"
import * as Path from "node:path"

const BIN = Path.resolve(import.meta.dirname, "../../../node_modules/.bin/svc")

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("svc mcp (stdio)", (it) => {
  it.effect(
    "the tools through the official client: create, exec, files, run code, delete; a read-only key refused as isError results, then none once revoked",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        yield* scenario(async (apiKey) => {
          const client = new Client({ name: "svc-test", version: "0.0.0" })
          await client.connect(
            new StdioClientTransport({
              command: BIN,
              args: ["mcp"],
              env: { PATH: "/usr/bin:/bin", SVC_API_URL: env.base, SVC_API_KEY: apiKey, SVC_STATE_DIR: Os.tmpdir() },
              stderr: "inherit"
            })
          )
          return client
        }, "result")
      }).pipe(Effect.scoped)
  )
})
