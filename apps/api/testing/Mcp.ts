/**
 * The MCP tools' scenario (api.md "MCP"), run with the official SDK's `Client` over a transport
 * the caller gives (stdio: apps/cli/test/Mcp.test.ts; Streamable HTTP: apps/api/test/mcp): list
 * the tools, create, exec, write and read, run code, list files; a read-only key's refusals as
 * `isError` results, and no call once that key is revoked; delete.
 */
import { expect } from "@effect/vitest"
import type { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { Svc } from "@svc/sdk"
import { Effect } from "effect"
import { Env } from "./SandboxesEnv.ts"

interface Answer {
  readonly isError: boolean
  readonly text: string
}

/** A tool's answer: its one text content and whether it is an error. */
export const call = (client: Client, name: string, args: Record<string, unknown> = {}) =>
  Effect.promise(async (): Promise<Answer> => {
    const result = await client.callTool({ name, arguments: args })
    const content = result.content as ReadonlyArray<{ type: string; text?: string }>
    expect(content).toHaveLength(1)
    return { isError: result.isError === true, text: content[0]?.text ?? "" }
  })

/** The answer's JSON, failing the test on an `isError`. */
export const ok = (answer: Answer) => {
  expect(answer.isError, answer.text).toBe(false)
  return JSON.parse(answer.text)
}

/** The error body of an `isError` answer. */
export const refused = (answer: Answer) => {
  expect(answer.isError, answer.text).toBe(true)
  return JSON.parse(answer.text) as { code: string; error: string }
}

export const TOOLS = [
  "create_sandbox",
  "delete_sandbox",
  "exec",
  "expose_port",
  "list_files",
  "list_sandboxes",
  "read_file",
  "run_code",
  "write_file"
]

/**
 * The scenario. `connect(key)` opens a client with that key (a process of `svc mcp`, or an HTTP
 * session); the clients are closed at the end. `revoked`: how a call with a revoked key fails.
 */
export const scenario = (connect: (apiKey: string) => Promise<Client>, revoked: "result" | "http_401") =>
  Effect.gen(function*() {
    const env = yield* Env
    const clients: Array<Client> = []
    const open = (key: string) =>
      Effect.promise(async () => {
        const client = await connect(key)
        clients.push(client)
        return client
      })
    yield* Effect.addFinalizer(() => Effect.promise(() => Promise.all(clients.map((c) => c.close()))))
    const client = yield* open(env.org.token)

    const { tools } = yield* Effect.promise(() => client.listTools())
    expect(tools.map((t) => t.name).sort()).toEqual(TOOLS)
    expect(tools.find((t) => t.name === "exec")?.inputSchema.required).toEqual(["sandbox_id", "cmd"])

    const sandbox = ok(yield* call(client, "create_sandbox", { name: "mcp" }))
    expect(sandbox).toMatchObject({ name: "mcp", state: "running" })
    const id: string = sandbox.id

    expect(ok(yield* call(client, "exec", { sandbox_id: id, cmd: ["sh", "-c", "echo hi; echo err >&2; exit 3"] })))
      .toMatchObject({ exit_code: 3, stdout: "hi\n", stderr: "err\n" })
    expect(ok(yield* call(client, "exec", { sandbox_id: id, cmd: ["pwd"], cwd: "/tmp" }))).toMatchObject({
      stdout: "/tmp\n"
    })

    ok(yield* call(client, "write_file", { sandbox_id: id, path: "/tmp/note.txt", content: "héllo mcp\n" }))
    expect(yield* call(client, "read_file", { sandbox_id: id, path: "/tmp/note.txt" })).toEqual({
      isError: false,
      text: "héllo mcp\n"
    })
    ok(
      yield* call(client, "write_file", {
        sandbox_id: id,
        path: "/tmp/bytes.bin",
        content_base64: Buffer.from("bytes!").toString("base64")
      })
    )
    expect((yield* call(client, "read_file", { sandbox_id: id, path: "/tmp/bytes.bin" })).text).toBe("bytes!")
    const listing = ok(yield* call(client, "list_files", { sandbox_id: id, path: "/tmp" }))
    expect(listing.entries.map((e: { name: string }) => e.name)).toEqual(
      expect.arrayContaining(["note.txt", "bytes.bin"])
    )
    // Bad arguments and a missing file: the error bodies, as results.
    expect(refused(yield* call(client, "exec", { sandbox_id: id, cmd: "not argv" })).code).toBe("invalid_request")
    expect(refused(yield* call(client, "read_file", { sandbox_id: id, path: "/tmp/none" })).code).toBe("not_found")

    const python = ok(yield* call(client, "exec", { sandbox_id: id, cmd: ["sh", "-c", "command -v python3"] }))
    if (python.exit_code === 0) {
      ok(yield* call(client, "run_code", { sandbox_id: id, code: "x = 41" }))
      // The same context again: its state kept.
      expect(ok(yield* call(client, "run_code", { sandbox_id: id, code: "print(x + 1)" })).stdout).toBe("42\n")
    } else {
      // The base image has no python: the context's 409, as a result.
      expect(refused(yield* call(client, "run_code", { sandbox_id: id, code: "1" })).code).toBe("conflict")
    }

    // A read-only key: what it may read works, the rest is refused as results.
    const admin = new Svc({ baseUrl: env.base, apiKey: env.org.token })
    const minted = yield* Effect.promise(() => admin.keys.create({ name: "mcp-read", scopes: ["sandboxes:read"] }))
    const reader = yield* open(minted.token)
    const rows = ok(yield* call(reader, "list_sandboxes", {})).rows
    expect(rows.map((r: { id: string }) => r.id)).toContain(id)
    for (
      const [name, args] of [
        ["exec", { sandbox_id: id, cmd: ["true"] }],
        ["write_file", { sandbox_id: id, path: "/tmp/x", content: "x" }],
        ["delete_sandbox", { sandbox_id: id }],
        ["create_sandbox", {}]
      ] as const
    ) {
      expect(refused(yield* call(reader, name, args)).code, name).toBe("insufficient_scope")
    }
    // Revoked: the same session's next call is refused (stdio: the API's 401 as a result; HTTP:
    // the request itself is answered 401, which the client throws).
    yield* Effect.promise(() => admin.keys.revoke(minted.id))
    if (revoked === "result") {
      expect(refused(yield* call(reader, "list_sandboxes", {})).code).toBe("unauthenticated")
    } else {
      const thrown = yield* Effect.promise(() =>
        reader.callTool({ name: "list_sandboxes", arguments: {} }).then(() => undefined, (e: unknown) => e)
      )
      expect(String(thrown)).toMatch(/"code":"unauthenticated"/)
    }

    expect(ok(yield* call(client, "delete_sandbox", { sandbox_id: id })).state).toMatch(/^delet/)
  })
