/**
 * An upgraded connection to a host's agent: a preview's byte tunnel to a sandbox's port
 * (`Upgrade: svc-tunnel`) and a terminal (`Upgrade: svc-pty`) are both an HTTP upgrade of a
 * data-plane route (`@svc/host-protocol/DataPlane`: the path built from its declaration by the
 * caller) with the host's bearer token. The agent answers 101 only once its end is ready; the
 * socket then carries whatever the two ends say.
 *
 * A raw `node:http` request rather than the derived client (`AgentClient.ts`): the caller pipes
 * the upgraded `net.Socket` to the public client's connection as it is. Any other answer is a
 * refusal, its body (the agent's error, at most 4 KiB read) given to the caller's `refused`.
 */
import type * as Errors from "@svc/domain/Errors"
import type { HostRecord } from "@svc/host-protocol/Protocol"
import { Effect } from "effect"
import * as Http from "node:http"
import type * as Net from "node:net"
import { unreachable } from "./AgentClient.ts"

export interface UpgradeRequest<E> {
  /** The route's path on the host (from `HttpApiClient.urlBuilder(AgentApi)`). */
  readonly path: string
  /** The `Upgrade` header's protocol (`TUNNEL_PROTOCOL`, `PTY_PROTOCOL`). */
  readonly protocol: string
  /** How long the host gets to answer. */
  readonly timeoutMs: number
  /** Interactive traffic (a terminal's keystrokes): no Nagle delay on the socket. */
  readonly noDelay?: boolean
  /** The host's refusal (its status and body) as the caller's error. */
  readonly refused: (status: number, body: string) => Effect.Effect<never, E>
}

/** Opens the upgraded connection; the socket is the caller's to end. */
export const open = <E>(host: HostRecord, upgrade: UpgradeRequest<E>) =>
  Effect.callback<Net.Socket, E | Errors.Unavailable>((resume, signal) => {
    const url = new URL(host.endpoint)
    const request = Http.request({
      host: url.hostname.replace(/^\[|\]$/g, ""),
      port: Number(url.port || 80),
      method: "GET",
      path: upgrade.path,
      agent: false,
      timeout: upgrade.timeoutMs,
      headers: { connection: "Upgrade", upgrade: upgrade.protocol, authorization: `Bearer ${host.token}` }
    })
    let settled = false
    const settle = (result: Effect.Effect<Net.Socket, E | Errors.Unavailable>) => {
      if (settled) return
      settled = true
      resume(result)
    }
    request.on("upgrade", (_response, socket, head) => {
      if (settled) return socket.destroy()
      socket.setTimeout(0)
      if (upgrade.noDelay === true) socket.setNoDelay(true)
      if (head.length > 0) socket.unshift(head)
      settle(Effect.succeed(socket))
    })
    request.on("response", (response) => {
      let body = ""
      response.setEncoding("utf8")
      response.on("data", (chunk: string) => {
        if (body.length < 4096) body += chunk
      })
      response.on("end", () => settle(upgrade.refused(response.statusCode ?? 0, body)))
      response.on("error", (cause) => settle(unreachable(host, cause)))
    })
    request.on("timeout", () => request.destroy(new Error("the host did not answer in time")))
    request.on("error", (cause) => settle(unreachable(host, cause)))
    signal.addEventListener("abort", () => request.destroy())
    request.end()
  })
