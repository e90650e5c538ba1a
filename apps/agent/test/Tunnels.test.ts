/**
 * Preview tunnels a sandbox holds on its host are bounded (issue 25, item 11): each costs the
 * agent two descriptors, and held previews from any number of API processes end here. Past
 * `maxTunnelsPerSandbox` a tunnel is 503 `busy`; a tunnel that ends frees its place.
 */
import { assert, layer } from "@effect/vitest"
import { TUNNEL_PROTOCOL } from "@svc/host-protocol/DataPlane"
import { Effect } from "effect"
import * as Http from "node:http"
import type * as Net from "node:net"
import {
  createRunning,
  eventually,
  http,
  makeHost,
  type RunningAgent,
  startAgent,
  testLayer
} from "../testing/Agent.ts"

type Opened = { readonly _tag: "Tunnel"; readonly socket: Net.Socket } | {
  readonly _tag: "Refused"
  readonly status: number
  readonly body: string
}

/** Asks the agent for a tunnel to `port` of the sandbox. */
const openTunnel = (agent: RunningAgent, sandboxId: string, port: number) =>
  Effect.callback<Opened>((resume) => {
    const url = new URL(agent.dataPlane.endpoint)
    const req = Http.request({
      host: url.hostname,
      port: Number(url.port),
      path: `/sandboxes/${sandboxId}/ports/${port}/tunnel`,
      agent: false,
      headers: {
        authorization: `Bearer ${agent.dataPlane.token}`,
        connection: "Upgrade",
        upgrade: TUNNEL_PROTOCOL
      }
    })
    req.on("upgrade", (_res, socket) => resume(Effect.succeed({ _tag: "Tunnel", socket })))
    req.on("response", (res) => {
      let body = ""
      res.on("data", (c: Buffer) => (body += c.toString("utf8")))
      res.on("end", () => resume(Effect.succeed({ _tag: "Refused", status: res.statusCode ?? 0, body })))
    })
    req.on("error", (e) => resume(Effect.die(e)))
    req.end()
  })

layer(testLayer, { excludeTestServices: true, timeout: 120_000 })("agent preview tunnels", (it) => {
  it.effect("past maxTunnelsPerSandbox a tunnel is 503 busy; one that ends frees its place", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host, { dataPlane: { maxTunnelsPerSandbox: 2 } })
      const sandboxId = yield* createRunning(agent, { ramMb: 128, exposedPorts: [8080] })
      // A server that echoes every connection's bytes back.
      yield* http(agent, `/sandboxes/${sandboxId}/exec`, {
        method: "POST",
        body: JSON.stringify({ cmd: ["sh", "-c", "setsid nc -ll -p 8080 -e /bin/cat </dev/null >/dev/null 2>&1 &"] })
      })
      const first = yield* eventually(openTunnel(agent, sandboxId, 8080), (o) => o._tag === "Tunnel")
      const second = yield* openTunnel(agent, sandboxId, 8080)
      assert.strictEqual(second._tag, "Tunnel")
      const third = yield* openTunnel(agent, sandboxId, 8080)
      assert.strictEqual(third._tag === "Refused" && third.status, 503)
      assert.strictEqual(third._tag === "Refused" && JSON.parse(third.body).reason, "busy")
      // The ones held still carry bytes both ways.
      const echoed = yield* Effect.callback<string>((resume) => {
        const socket = (second as Extract<Opened, { _tag: "Tunnel" }>).socket
        socket.once("data", (c: Buffer) => resume(Effect.succeed(c.toString("utf8"))))
        socket.write("ping")
      })
      assert.strictEqual(echoed, "ping") // One ends: its place is the sandbox's again.
      ;(first as Extract<Opened, { _tag: "Tunnel" }>).socket.destroy()
      const again = yield* eventually(openTunnel(agent, sandboxId, 8080), (o) => o._tag === "Tunnel")
      assert.strictEqual(again._tag, "Tunnel")
      for (const o of [second, again]) if (o._tag === "Tunnel") o.socket.destroy()
    }))
})
