/**
 * The agent's end of a preview tunnel (the API's end: packages/sandboxes/src/Previews/Tunnel.ts):
 * `GET /sandboxes/{id}/ports/{port}/tunnel` with `Upgrade: svc-tunnel` and the host's bearer
 * token. The agent asks the driver where the port is (a running sandbox, an exposed port only),
 * connects, and only then answers `101`: the connection then carries bytes both ways until
 * either side closes. Refusals are `AgentError` bodies: 400 `invalid` (a port the sandbox does
 * not expose), 401, 404, 409 `not_running`, 502 `failed` (nothing answers on the port).
 */
import { TUNNEL_PROTOCOL, TUNNEL_ROUTE } from "@svc/host-protocol/PortTunnel"
import type { AgentError } from "@svc/host-protocol/Protocol"
import { Effect } from "effect"
import type * as Http from "node:http"
import * as Net from "node:net"
import type { Duplex } from "node:stream"
import { SandboxDriver, type SandboxDriverError } from "./Driver.ts"

const CONNECT_TIMEOUT_MS = 5_000

const STATUS_TEXT: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  404: "Not Found",
  409: "Conflict",
  500: "Internal Server Error",
  502: "Bad Gateway"
}

/** Answers a refusal on the raw connection and closes it. */
const refuse = (socket: Duplex, status: number, body: AgentError) => {
  const text = JSON.stringify(body)
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? "Error"}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`
  )
}

const refusalOf = (error: SandboxDriverError): readonly [number, AgentError] => {
  switch (error._tag) {
    case "InvalidSandboxRequest":
      return [400, { error: error.message, reason: "invalid" }]
    case "SandboxNotFound":
      return [404, { error: "no such sandbox on this host", reason: "not_found" }]
    case "SandboxNotRunning":
      return [409, { error: "the sandbox is not running", reason: "not_running" }]
    default:
      return [500, { error: "the host could not open the port", reason: "failed" }]
  }
}

/**
 * Handles one `upgrade` request of the data plane's server. `authorized` checks the bearer
 * header (constant time, the data plane's own check).
 */
export const handleTunnel = (
  request: Http.IncomingMessage,
  socket: Duplex,
  head: Buffer,
  authorized: (header: string | undefined) => boolean
): Effect.Effect<void, never, SandboxDriver> =>
  Effect.gen(function*() {
    socket.on("error", () => socket.destroy())
    if (!authorized(request.headers.authorization)) {
      return refuse(socket, 401, { error: "missing or wrong bearer token", reason: "unauthorized" })
    }
    const match = TUNNEL_ROUTE.exec(new URL(request.url ?? "/", "http://agent").pathname)
    if (match === null || request.headers.upgrade?.toLowerCase() !== TUNNEL_PROTOCOL) {
      return refuse(socket, 404, { error: "no such route", reason: "not_found" })
    }
    let sandboxId: string
    try {
      sandboxId = decodeURIComponent(match[1]!)
    } catch {
      return refuse(socket, 400, { error: "sandbox id is not valid percent-encoding", reason: "invalid" })
    }
    const driver = yield* SandboxDriver
    const address = yield* Effect.result(driver.portAddress(sandboxId, Number(match[2])))
    if (address._tag === "Failure") {
      const [status, body] = refusalOf(address.failure)
      if (status === 500) yield* Effect.logError("agent: tunnel failed", { message: address.failure.message })
      return refuse(socket, status, body)
    }
    const { host, port } = address.success
    const upstream = Net.connect({ host, port })
    upstream.setTimeout(CONNECT_TIMEOUT_MS)
    const cleanup = () => {
      upstream.destroy()
      socket.destroy()
    }
    let connected = false
    upstream.once("timeout", () => upstream.destroy(new Error("timed out")))
    upstream.on("error", () => {
      if (connected) return cleanup()
      refuse(socket, 502, { error: `nothing answers on port ${port} of the sandbox`, reason: "failed" })
    })
    upstream.once("connect", () => {
      connected = true
      upstream.setTimeout(0)
      socket.on("error", cleanup)
      socket.write(`HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: ${TUNNEL_PROTOCOL}\r\n\r\n`)
      if (head.length > 0) upstream.write(head)
      socket.pipe(upstream)
      upstream.pipe(socket)
      socket.once("close", () => upstream.destroy())
      upstream.once("close", () => socket.destroy())
    })
  })
