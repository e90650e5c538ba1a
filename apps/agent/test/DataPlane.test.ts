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
import { eventually } from "@svc/testing/Eventually"
import { Effect, Schema, Stream } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import { HttpApiClient } from "effect/http-api"
import { createHash, randomBytes } from "node:crypto"
import * as Http from "node:http"
import type * as Net from "node:net"
import { createRunning, http, makeHost, type RunningAgent, startAgent, testLayer } from "../testing/Agent.ts"

/** A transfer asked spliced: the switched connection (101) or the plain answer's status and body. */
const askSplice = (agent: RunningAgent, method: "GET" | "PUT", path: string, token: string | undefined) =>
  new Promise<{
    readonly status: number
    readonly headers?: Http.IncomingHttpHeaders
    readonly socket?: Net.Socket
    readonly head?: Buffer
    readonly body?: string
  }>((resolve, reject) => {
    const request = Http.request(agent.dataPlane.endpoint + path, {
      method,
      agent: false,
      headers: {
        connection: "Upgrade",
        upgrade: "svc-splice",
        "content-length": "0",
        ...(token !== undefined ? { authorization: `Bearer ${token}` } : {})
      }
    })
    request.once("upgrade", (response, socket: Net.Socket, head: Buffer) =>
      resolve({ status: response.statusCode!, headers: response.headers, socket, head }))
    request.once("response", (response) => {
      const chunks: Array<Buffer> = []
      response.on("data", (chunk: Buffer) =>
        chunks.push(chunk))
      response.once("end", () =>
        resolve({ status: response.statusCode!, body: Buffer.concat(chunks).toString("utf8") }))
    })
    request.once("error", reject)
    request.end()
  })

/** Everything a connection sends until its end, after `head`. */
const readAll = (socket: Net.Socket, head: Buffer) =>
  new Promise<Buffer>((resolve, reject) => {
    const chunks = [head]
    socket.on("data", (chunk: Buffer) => chunks.push(chunk))
    socket.once("end", () => resolve(Buffer.concat(chunks)))
    socket.once("error", reject)
  })

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

  it.effect("a spliced transfer (Upgrade: svc-splice): a file up and down byte for byte, a small file answered plainly, a refusal before the 101, a file cut while sent reset, a cut upload leaving nothing", () =>
    Effect.gen(function*() {
      const agent = yield* startAgent(yield* makeHost)
      const sandboxId = yield* createRunning(agent)
      const client = yield* clientFor(agent, agent.dataPlane.token)
      const run = (script: string) =>
        client.sandboxes.exec({ params: { id: sandboxId }, payload: { cmd: ["sh", "-c", script] } })
      const files = (path: string) => `/sandboxes/${sandboxId}/files?path=${encodeURIComponent(path)}`

      // Up: 101 at once, the body, then one result line; the bytes are the file's.
      const bytes = randomBytes(5 * 1024 * 1024 + 7)
      const up = yield* Effect.promise(() => askSplice(agent, "PUT", files("/root/up.bin"), agent.dataPlane.token))
      assert.strictEqual(up.status, 101)
      up.socket!.end(bytes)
      const answer = yield* Effect.promise(() => readAll(up.socket!, up.head!))
      assert.deepStrictEqual(JSON.parse(answer.toString("utf8")), { status: 204 })
      const sum = yield* run("sha256sum /root/up.bin; ls -A /root")
      assert.strictEqual(sum.stdout, `${createHash("sha256").update(bytes).digest("hex")}  /root/up.bin\nup.bin\n`)

      // Down: 101 with the size, exactly that many bytes, then the end.
      const down = yield* Effect.promise(() => askSplice(agent, "GET", files("/root/up.bin"), agent.dataPlane.token))
      assert.strictEqual(down.status, 101)
      assert.strictEqual(down.headers!["x-svc-size"], String(bytes.length))
      const got = yield* Effect.promise(() => readAll(down.socket!, down.head!))
      assert.isTrue(got.equals(bytes))

      // A file cut short while it is sent (truncated behind the stalled reader): the connection
      // is reset before `x-svc-size` bytes, never ended as if whole.
      yield* run("head -c 67108864 /dev/zero > /root/shrinks.bin")
      const shrinking = yield* Effect.promise(() =>
        askSplice(agent, "GET", files("/root/shrinks.bin"), agent.dataPlane.token)
      )
      assert.strictEqual(shrinking.status, 101)
      yield* Effect.sleep(300)
      yield* run("truncate -s 1048576 /root/shrinks.bin")
      const cutShort = yield* Effect.promise(() =>
        readAll(shrinking.socket!, shrinking.head!).then((b) => b.length, (e: Error) => e.message)
      )
      assert.notStrictEqual(cutShort, 67108864, "a file cut short is never sent as whole")

      // A small file: answered plainly (200, its bytes), no switch.
      yield* run("printf 'short' > /root/small.txt")
      const small = yield* Effect.promise(() =>
        askSplice(agent, "GET", files("/root/small.txt"), agent.dataPlane.token)
      )
      assert.deepStrictEqual([small.status, small.body], [200, "short"])
      yield* run("head -c 100000 /dev/zero | tr '\\0' x > /root/medium.txt")
      const medium = yield* Effect.promise(() =>
        askSplice(agent, "GET", files("/root/medium.txt"), agent.dataPlane.token)
      )
      assert.deepStrictEqual([medium.status, medium.body], [200, "x".repeat(100_000)])

      // Refusals come before the 101, as on the plain route; without the token nothing happens.
      const missing = yield* Effect.promise(() => askSplice(agent, "GET", files("/root/none"), agent.dataPlane.token))
      assert.strictEqual(missing.status, 404)
      assert.deepInclude(JSON.parse(missing.body!), { reason: "not_found" })
      const intoFolder = yield* Effect.promise(() => askSplice(agent, "PUT", files("/root"), agent.dataPlane.token))
      assert.strictEqual(intoFolder.status, 400)
      const anonymous = yield* Effect.promise(() => askSplice(agent, "PUT", files("/root/anon.bin"), undefined))
      assert.strictEqual(anonymous.status, 401)

      // Cut: 1 MiB sent, then the connection reset. The old file stays, no temporary is left.
      const cut = yield* Effect.promise(() => askSplice(agent, "PUT", files("/root/up.bin"), agent.dataPlane.token))
      assert.strictEqual(cut.status, 101)
      cut.socket!.write(randomBytes(1024 * 1024))
      yield* Effect.sleep(200)
      cut.socket!.resetAndDestroy()
      const after = yield* eventually(
        run("sha256sum /root/up.bin; ls -A /root"),
        (r) =>
          r.stdout ===
            `${
              createHash("sha256").update(bytes).digest("hex")
            }  /root/up.bin\nmedium.txt\nshrinks.bin\nsmall.txt\nup.bin\n`
      )
      assert.strictEqual(after.exit_code, 0)
    }))
})
