/**
 * `svc mcp`: the MCP tools (api.md "MCP", `@svc/mcp`) served over stdio to an MCP client that
 * starts this command, calling the API with the CLI's credentials (SVC_API_URL, SVC_API_KEY).
 * It runs until the client closes its stdin. Its stdout is the protocol's: nothing else prints.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { CliError, credentials } from "../Client.ts"

export const mcp = Command.make(
  "mcp",
  {},
  Effect.fn(function*() {
    const creds = yield* credentials
    yield* Effect.tryPromise({
      // Loaded here, not at the top: the MCP SDK is for this command alone (`svc --help` stays fast).
      try: async () => {
        const [{ makeServer }, { StdioServerTransport }] = await Promise.all([
          import("@svc/mcp"),
          import("@modelcontextprotocol/sdk/server/stdio.js")
        ])
        const transport = new StdioServerTransport()
        const closed = new Promise<void>((resolve) => {
          transport.onclose = resolve
          process.stdin.once("end", resolve)
        })
        await makeServer({ apiUrl: creds.baseUrl, apiKey: creds.apiKey }).connect(transport)
        await closed
      },
      catch: (e) => new CliError({ message: `mcp: ${e instanceof Error ? e.message : String(e)}` })
    })
  })
).pipe(Command.withDescription("Serve the MCP tools over stdio (for an MCP client's configuration)"))
