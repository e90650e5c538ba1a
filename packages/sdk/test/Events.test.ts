/**
 * The SDK's waits (`src/Events.ts`, `waitThrough`): the waits in progress on one client share one
 * `GET /v1/events` stream (one per filter), each woken by the events about its own sandbox, and
 * the stream is closed when the last of them ends; without a stream they poll. Against a stand-in
 * API (a real HTTP server) whose records and events the test sets.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { Svc } from "../src/index.ts"

/** A stand-in API: sandbox records by id, and an event stream the test writes to. */
const standIn = async (options: { readonly refuseEvents?: boolean } = {}) => {
  const states = new Map<string, string>()
  const streams = new Set<Http.ServerResponse>()
  let opened = 0
  let closed = 0
  let seq = 0
  const server = Http.createServer((request, response) => {
    const url = new URL(request.url!, "http://x")
    if (url.pathname === "/v1/events") {
      opened++
      if (options.refuseEvents === true) {
        response.writeHead(403, { "content-type": "application/json" })
        response.end(JSON.stringify({ error: "no events for this key", code: "forbidden" }))
        return
      }
      response.writeHead(200, { "content-type": "text/event-stream" })
      response.write(": connected\n\n")
      streams.add(response)
      request.on("close", () => {
        streams.delete(response)
        closed++
      })
      return
    }
    const id = /^\/v1\/sandboxes\/([^/]+)$/.exec(url.pathname)?.[1]
    if (id !== undefined && states.has(id)) {
      response.writeHead(200, { "content-type": "application/json" })
      response.end(JSON.stringify({ id, name: id, state: states.get(id) }))
      return
    }
    response.writeHead(404, { "content-type": "application/json" })
    response.end(JSON.stringify({ error: "no such thing", code: "not_found" }))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    svc: () => new Svc({ baseUrl: `http://127.0.0.1:${port}`, apiKey: "svc_live_test" }),
    /** Sets a sandbox's state and tells every open stream, as the platform's event would. */
    set: (id: string, state: string) => {
      states.set(id, state)
      const envelope = {
        event: "sandbox.state_updated",
        org_id: "org_1",
        ts: new Date().toISOString(),
        data: { sandbox_id: id, state }
      }
      for (const stream of streams) {
        stream.write(`id: ${++seq}\nevent: sandbox.state_updated\ndata: ${JSON.stringify(envelope)}\n\n`)
      }
    },
    counts: () => ({ opened, closed, open: streams.size }),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        // The client's kept-alive connections too, not after their idle timeout.
        server.closeAllConnections()
      })
  }
}

const until = async (check: () => boolean) => {
  const deadline = Date.now() + 5_000
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out")
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

describe("waits on one client", () => {
  it("share one event stream, each ends on its own sandbox's event, and the stream closes after the last", async () => {
    const api = await standIn()
    try {
      const svc = api.svc()
      const ids = ["sbx_a", "sbx_b", "sbx_c"]
      for (const id of ids) api.set(id, "pending")
      const sandboxes = await Promise.all(ids.map((id) => svc.sandboxes.get(id)))
      const ended: Array<string> = []
      const waits = sandboxes.map((s) => s.waitFor("running").then(() => ended.push(s.id)))
      await until(() => api.counts().open === 1)
      // Another sandbox's event wakes no one's wait to its end.
      api.set("sbx_b", "running")
      await until(() => ended.length === 1)
      expect(ended).toEqual(["sbx_b"])
      api.set("sbx_a", "running")
      api.set("sbx_c", "running")
      await Promise.all(waits)
      expect(ended.sort()).toEqual(ids)
      await until(() => api.counts().open === 0)
      expect(api.counts()).toEqual({ opened: 1, closed: 1, open: 0 })
    } finally {
      await api.close()
    }
  })

  it("a wait that joins an open stream is woken by what follows", async () => {
    const api = await standIn()
    try {
      const svc = api.svc()
      api.set("sbx_a", "pending")
      api.set("sbx_b", "pending")
      const [a, b] = await Promise.all([svc.sandboxes.get("sbx_a"), svc.sandboxes.get("sbx_b")])
      const first = a!.waitFor("running")
      await until(() => api.counts().open === 1)
      const second = b!.waitFor("running")
      api.set("sbx_b", "running")
      await second
      expect(b!.state).toBe("running")
      api.set("sbx_a", "running")
      await first
      expect(api.counts().opened).toBe(1)
      // The next wait after the last one ended opens a stream of its own again.
      api.set("sbx_a", "stopped")
      await until(() => api.counts().open === 0)
      const again = a!.waitFor("running")
      await until(() => api.counts().open === 1)
      api.set("sbx_a", "running")
      await again
      expect(api.counts().opened).toBe(2)
    } finally {
      await api.close()
    }
  })

  it("without a stream (refused), every wait polls and still ends", async () => {
    const api = await standIn({ refuseEvents: true })
    try {
      const svc = api.svc()
      api.set("sbx_a", "pending")
      api.set("sbx_b", "pending")
      const sandboxes = await Promise.all([svc.sandboxes.get("sbx_a"), svc.sandboxes.get("sbx_b")])
      const waits = Promise.all(sandboxes.map((s) => s.waitFor("running", { timeoutMs: 5_000 })))
      await new Promise((resolve) => setTimeout(resolve, 150))
      api.set("sbx_a", "running")
      api.set("sbx_b", "running")
      await waits
      expect(sandboxes.map((s) => s.state)).toEqual(["running", "running"])
    } finally {
      await api.close()
    }
  })
})
