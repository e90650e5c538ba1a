/**
 * What the OpenAPI document says of `POST /mcp` (docs/contract.md#mcp). The route is served
 * outside the HttpApi (apps/api/src/Http/Mcp.ts hands the request to the MCP SDK's Streamable
 * HTTP transport, whose JSON-RPC bodies no Schema of ours describes), so it is added to the
 * document here, by the `OpenApi.Transform` of `Api`, before the bearer and shared limits are
 * declared on every operation.
 */
import { MAX_ERROR_MESSAGE } from "../Errors.ts"

const TOOLS = [
  "create_sandbox",
  "list_sandboxes",
  "delete_sandbox",
  "exec",
  "run_code",
  "read_file",
  "write_file",
  "list_files",
  "expose_port"
] as const

/** A JSON-RPC 2.0 message as MCP sends it: one request, notification or response. */
const JSON_RPC = {
  type: "object",
  description: "A JSON-RPC 2.0 message of the Model Context Protocol (`initialize`, `tools/list`, " +
    "`tools/call`, ...), as https://modelcontextprotocol.io/specification defines it.",
  properties: {
    jsonrpc: { type: "string", enum: ["2.0"] },
    id: {
      oneOf: [{ type: "string", maxLength: 256 }, {
        type: "integer",
        format: "int64",
        minimum: -Number.MAX_SAFE_INTEGER,
        maximum: Number.MAX_SAFE_INTEGER
      }]
    },
    method: { type: "string", maxLength: 256 },
    params: { type: "object", additionalProperties: true },
    result: { type: "object", additionalProperties: true },
    error: { type: "object", additionalProperties: true }
  },
  required: ["jsonrpc"],
  additionalProperties: false
} as const

const ERROR = (code: string) => ({
  "application/json": {
    schema: {
      type: "object",
      properties: {
        error: { type: "string", maxLength: MAX_ERROR_MESSAGE },
        code: { type: "string", enum: [code] }
      },
      required: ["error", "code"],
      additionalProperties: false
    }
  }
})

export const declareMcp = (spec: Record<string, any>): Record<string, any> => {
  spec.paths = {
    ...spec.paths,
    "/mcp": {
      post: {
        operationId: "mcp.post",
        tags: ["MCP"],
        summary: "The Model Context Protocol server (Streamable HTTP, stateless)",
        description: "Each request is answered with JSON (no session id: stateless; `GET` and `DELETE` are 405). " +
          "The bearer key is checked as on every route, and each tool calls this API's own routes with it, so " +
          `the key's scopes apply to each tool and a revoked key is refused at the next call. Tools: ${
            TOOLS.map((tool) => `\`${tool}\``).join(", ")
          }; a refusal is an \`isError\` result carrying the route's error body.`,
        requestBody: {
          required: true,
          content: {
            "application/json": {
              schema: { oneOf: [JSON_RPC, { type: "array", items: JSON_RPC, maxItems: 100 }] }
            }
          }
        },
        responses: {
          "200": {
            description: "The JSON-RPC response (or responses, for a batch)",
            content: {
              "application/json": { schema: { oneOf: [JSON_RPC, { type: "array", items: JSON_RPC, maxItems: 100 }] } }
            }
          },
          "202": { description: "A notification or a response was accepted (no body)" },
          "400": { description: "Not a JSON-RPC message the transport accepts (a JSON-RPC error body)" },
          "401": { description: "No valid bearer key (`unauthenticated`)", content: ERROR("unauthenticated") },
          "406": { description: "The `Accept` header names neither `application/json` nor `text/event-stream`" },
          "429": {
            description: "Too many failed credentials from this address (`rate_limited`)",
            content: ERROR("rate_limited")
          }
        }
      }
    }
  }
  return spec
}
