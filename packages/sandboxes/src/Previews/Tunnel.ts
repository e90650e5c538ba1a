/**
 * A byte tunnel to one exposed port of a sandbox, opened by the sandbox's agent: an HTTP
 * upgrade (`GET {endpoint}/sandboxes/{id}/ports/{port}/tunnel`, `Upgrade: svc-tunnel`, the
 * host's bearer token). The agent connects to the port first and answers 101 only once it is
 * connected; the socket then carries whatever the client and the sandbox say (HTTP, WebSocket).
 * The route and its refusals are the data plane's (`@svc/host-protocol/DataPlane`, endpoint
 * `tunnel`): the path is built from its declaration and a refusal decoded with its error classes.
 * A raw `node:http` request rather than the derived client: the caller pipes the upgraded
 * `net.Socket` to the public client's connection as it is.
 */
import * as Errors from "@svc/domain/Errors"
import {
  AgentApi,
  AgentBadGateway,
  AgentFailed,
  AgentInvalid,
  AgentNotFound,
  AgentNotRunning,
  AgentUnauthorized,
  TUNNEL_PROTOCOL
} from "@svc/host-protocol/DataPlane"
import type { HostRecord } from "@svc/host-protocol/Protocol"
import { Effect, Option, Schema } from "effect"
import { HttpApiClient } from "effect/http-api"
import * as Http from "node:http"
import type * as Net from "node:net"

/** How long the agent gets to connect to the port and answer. */
const OPEN_TIMEOUT_MS = 10_000

const decodeAgentError = Schema.decodeUnknownOption(
  Schema.fromJsonString(
    Schema.Union([AgentInvalid, AgentUnauthorized, AgentNotFound, AgentNotRunning, AgentFailed, AgentBadGateway])
  )
)

const urls = HttpApiClient.urlBuilder(AgentApi)

type TunnelError = Errors.NotFound | Errors.Conflict | Errors.BadGateway | Errors.Unavailable

const refusal = (status: number, body: string): TunnelError => {
  const error = decodeAgentError(body)
  const reason = Option.isSome(error) ? error.value.reason : undefined
  switch (reason) {
    case "not_found":
      return new Errors.NotFound({ error: "No such sandbox on its host" })
    case "not_running":
      return new Errors.Conflict({ error: "This sandbox is not running" })
    case "invalid":
      return new Errors.NotFound({ error: "This port is not one of the sandbox's exposed ports" })
    default:
      return status === 502
        ? new Errors.BadGateway()
        : new Errors.Unavailable({ error: "The sandbox's host could not open the port; retry" })
  }
}

/** Opens the tunnel; the socket is the caller's to end. */
export const open = (host: HostRecord, sandboxId: string, port: number) =>
  Effect.callback<Net.Socket, TunnelError>((resume, signal) => {
    const url = new URL(host.endpoint)
    const request = Http.request({
      host: url.hostname.replace(/^\[|\]$/g, ""),
      port: Number(url.port || 80),
      method: "GET",
      path: urls.sandboxes.tunnel({ params: { id: sandboxId, port: String(port) } }),
      agent: false,
      timeout: OPEN_TIMEOUT_MS,
      headers: { connection: "Upgrade", upgrade: TUNNEL_PROTOCOL, authorization: `Bearer ${host.token}` }
    })
    let settled = false
    const settle = (result: Effect.Effect<Net.Socket, TunnelError>) => {
      if (settled) return
      settled = true
      resume(result)
    }
    const unreachable = (cause: unknown) =>
      settle(Effect.andThen(
        Effect.logWarning("preview: host unreachable", { hostId: host.hostId, cause: String(cause) }),
        Effect.fail(new Errors.Unavailable({ error: "The sandbox's host cannot be reached; retry" }))
      ))
    request.on("upgrade", (_response, socket, head) => {
      if (settled) return socket.destroy()
      socket.setTimeout(0)
      if (head.length > 0) socket.unshift(head)
      settle(Effect.succeed(socket))
    })
    request.on("response", (response) => {
      let body = ""
      response.setEncoding("utf8")
      response.on("data", (chunk: string) => {
        if (body.length < 4096) body += chunk
      })
      response.on("end", () => settle(Effect.fail(refusal(response.statusCode ?? 0, body))))
      response.on("error", unreachable)
    })
    request.on("timeout", () => request.destroy(new Error("the host did not answer in time")))
    request.on("error", unreachable)
    signal.addEventListener("abort", () => request.destroy())
    request.end()
  })
