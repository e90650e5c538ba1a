/**
 * The MCP tools (api.md "MCP"), written once over the Promise SDK (`@svc/sdk`) with a given API
 * URL and key: `svc mcp` serves them over stdio, the API's `POST /mcp` over Streamable HTTP.
 * Each tool is one or two calls of the API's own routes with that key, so the key's scopes (and
 * its revocation) apply to each tool exactly as to the routes.
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { CallToolRequestSchema, type CallToolResult, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js"
import { Svc, SvcError } from "@svc/sdk"
import { Schema } from "effect"

export interface McpOptions {
  /** The API's address (no `/v1`). */
  readonly apiUrl: string
  readonly apiKey: string
  /** Another `fetch` (the API's in-process one, a test's). */
  readonly fetch?: typeof globalThis.fetch | undefined
}

const SandboxId = Schema.String
const Path = Schema.String
const StringMap = Schema.Record(Schema.String, Schema.String)

/** One tool: its description, the schema of its arguments, what it does with them. */
interface Tool<S extends Schema.Top> {
  readonly description: string
  readonly input: S
  readonly run: (svc: Svc, args: S["Type"]) => Promise<string>
}

/** A tool with its arguments' type erased: `call` decodes them first (an `invalid_request`). */
interface AnyTool {
  readonly description: string
  readonly input: Schema.Top
  readonly call: (svc: Svc, name: string, args: unknown) => Promise<string>
}

const tool = <S extends Schema.Top & Schema.Codec<any, unknown>>(t: Tool<S>): AnyTool => ({
  description: t.description,
  input: t.input,
  call: (svc, name, args) => {
    const decoded = Schema.decodeUnknownExit(t.input)(args)
    if (decoded._tag === "Failure") {
      throw new SvcError({ status: 400, code: "invalid_request", message: `invalid arguments of ${name}` })
    }
    return t.run(svc, decoded.value)
  }
})
const json = (value: unknown) => JSON.stringify(value)

/** A context per sandbox and language, found again through the API (no state here, so the HTTP
 * transport's stateless requests share them): the newest not dead, else a new one. */
const contextFor = async (svc: Svc, sandboxId: string, language: "python" | "javascript" | "bash") => {
  const sandbox = await svc.sandboxes.get(sandboxId)
  const found = (await sandbox.contexts.list()).find((c) => c.record.language === language && c.state !== "dead")
  return found ?? sandbox.contexts.create({ language })
}

const TOOLS = {
  create_sandbox: tool({
    description: "Creates a sandbox and answers its record once it runs. Takes the body of POST " +
      "/v1/sandboxes: name, template, env, cpu, ram_mb, disk_gb, metadata, timeout_s, network...",
    // The route's whole body, checked by the route itself (its errors come back as they are).
    input: Schema.Record(Schema.String, Schema.Unknown),
    run: async (svc, args) => json(await svc.sandboxes.create(args as never))
  }),
  list_sandboxes: tool({
    description: "Lists the org's sandboxes, newest first.",
    input: Schema.Struct({
      state: Schema.optionalKey(Schema.String),
      limit: Schema.optionalKey(Schema.Int),
      offset: Schema.optionalKey(Schema.Int)
    }),
    run: async (svc, args) => {
      const page = await svc.sandboxes.list(args as never)
      return json({ ...page, rows: page.rows.map((s) => s.record) })
    }
  }),
  delete_sandbox: tool({
    description: "Deletes a sandbox.",
    input: Schema.Struct({ sandbox_id: SandboxId }),
    run: async (svc, args) => json(await (await svc.sandboxes.get(args.sandbox_id)).delete())
  }),
  exec: tool({
    description: "Runs a command (argv) in a sandbox and answers its exit code, stdout and stderr.",
    input: Schema.Struct({
      sandbox_id: SandboxId,
      cmd: Schema.Array(Schema.String),
      cwd: Schema.optionalKey(Schema.String),
      env: Schema.optionalKey(StringMap),
      timeout_ms: Schema.optionalKey(Schema.Int)
    }),
    run: async (svc, { sandbox_id, cmd, timeout_ms, ...rest }) =>
      json(
        await (await svc.sandboxes.get(sandbox_id)).exec(cmd, {
          ...rest,
          ...(timeout_ms !== undefined ? { timeoutMs: timeout_ms } : {})
        })
      )
  }),
  run_code: tool({
    description: "Runs code in the sandbox's code context of that language (its state kept between calls).",
    input: Schema.Struct({
      sandbox_id: SandboxId,
      code: Schema.String,
      language: Schema.optionalKey(Schema.Literals(["python", "javascript", "bash"]))
    }),
    run: async (svc, args) =>
      json(await (await contextFor(svc, args.sandbox_id, args.language ?? "python")).run(args.code))
  }),
  read_file: tool({
    description: "Reads a file of a sandbox as UTF-8 text.",
    input: Schema.Struct({ sandbox_id: SandboxId, path: Path }),
    run: async (svc, args) => (await svc.sandboxes.get(args.sandbox_id)).files.readText(args.path)
  }),
  write_file: tool({
    description: "Writes a file of a sandbox: `content` as UTF-8 text or `content_base64` as bytes.",
    input: Schema.Struct({
      sandbox_id: SandboxId,
      path: Path,
      content: Schema.optionalKey(Schema.String),
      content_base64: Schema.optionalKey(Schema.String)
    }),
    run: async (svc, args) => {
      if ((args.content === undefined) === (args.content_base64 === undefined)) {
        throw new SvcError({
          status: 400,
          code: "invalid_request",
          message: "give exactly one of content and content_base64"
        })
      }
      const data = args.content ?? Buffer.from(args.content_base64 ?? "", "base64")
      await (await svc.sandboxes.get(args.sandbox_id)).files.write(args.path, data)
      return json({ path: args.path, written: true })
    }
  }),
  list_files: tool({
    description: "Lists a folder of a sandbox.",
    input: Schema.Struct({ sandbox_id: SandboxId, path: Path }),
    run: async (svc, args) => json({ entries: await (await svc.sandboxes.get(args.sandbox_id)).files.list(args.path) })
  }),
  expose_port: tool({
    description: "Answers a preview URL and token for a port a sandbox listens on.",
    input: Schema.Struct({ sandbox_id: SandboxId, port: Schema.Int }),
    run: async (svc, args) => json(await (await svc.sandboxes.get(args.sandbox_id)).exposePort(args.port))
  })
} satisfies Record<string, AnyTool>

export const TOOL_NAMES = Object.keys(TOOLS) as ReadonlyArray<keyof typeof TOOLS>

/** The error body of the API (`{error, code, ...details}`) as an `isError` result. */
const errorResult = (error: unknown): CallToolResult => {
  const body = error instanceof SvcError
    ? { error: error.message, code: error.code, status: error.status, ...error.details }
    : { error: error instanceof Error ? error.message : String(error), code: "internal_error" }
  return { isError: true, content: [{ type: "text", text: JSON.stringify(body) }] }
}

const inputSchemas = Object.fromEntries(
  Object.entries(TOOLS).map(([name, t]) => [name, Schema.toJsonSchemaDocument(t.input).schema])
)

/** An MCP server whose tools call the API at `apiUrl` with `apiKey`; connect it to a transport. */
export const makeServer = (options: McpOptions): Server => {
  const svc = new Svc({ baseUrl: options.apiUrl, apiKey: options.apiKey, fetch: options.fetch })
  const server = new Server({ name: "svc", version: "0.1.0" }, { capabilities: { tools: {} } })
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: Object.entries(TOOLS).map(([name, t]) => ({
      name,
      description: t.description,
      inputSchema: { type: "object" as const, ...inputSchemas[name] }
    }))
  }))
  server.setRequestHandler(CallToolRequestSchema, async (request): Promise<CallToolResult> => {
    const name = request.params.name
    const t: AnyTool | undefined = Object.hasOwn(TOOLS, name) ? TOOLS[name as keyof typeof TOOLS] : undefined
    if (t === undefined) {
      return errorResult(new SvcError({ status: 404, code: "not_found", message: `no tool ${name}` }))
    }
    try {
      return { content: [{ type: "text", text: await t.call(svc, name, request.params.arguments ?? {}) }] }
    } catch (error) {
      return errorResult(error)
    }
  })
  return server
}
