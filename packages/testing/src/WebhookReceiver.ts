/**
 * A real webhook receiver for tests and benchmarks: an HTTP server on 127.0.0.1 that records every
 * request (arrival time, headers, raw body) and answers as told. It verifies nothing itself:
 * tests check signatures with their own HMAC, independent of the code under test.
 */
import { Effect } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"

export interface Received {
  /** performance.now() when the body was fully read. */
  readonly at: number
  readonly method: string
  readonly path: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: Buffer
}

/** How to answer: a status (after an optional delay), or never ("hang": the socket stays open). */
export type Reply =
  | { readonly status: number; readonly delayMs?: number; readonly headers?: Record<string, string> }
  | "hang"

export interface Receiver {
  readonly url: string
  readonly port: number
  readonly received: Array<Received>
  /** Changes the answer for the following requests (`n` is the 1-based request number). */
  setReply(reply: (request: Received, n: number) => Reply): void
  /** Resolves once `count` requests arrived; rejects after `timeoutMs`. */
  waitFor(count: number, timeoutMs?: number): Promise<void>
  close(): Promise<void>
}

export const startReceiver = async (
  reply: (request: Received, n: number) => Reply = () => ({ status: 204 })
): Promise<Receiver> => {
  const received: Array<Received> = []
  let answer = reply
  const waiters: Array<{ count: number; resolve: () => void }> = []
  const timers = new Set<NodeJS.Timeout>()
  const server = http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const request: Received = {
        at: performance.now(),
        method: req.method ?? "",
        path: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks)
      }
      received.push(request)
      for (const waiter of waiters.filter((w) => received.length >= w.count)) {
        waiters.splice(waiters.indexOf(waiter), 1)
        waiter.resolve()
      }
      const r = answer(request, received.length)
      if (r === "hang") return
      const send = () => {
        if (res.destroyed) return
        res.writeHead(r.status, r.headers ?? {})
        res.end()
      }
      if (r.delayMs === undefined || r.delayMs <= 0) return send()
      const timer = setTimeout(() => {
        timers.delete(timer)
        send()
      }, r.delayMs)
      timers.add(timer)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    port,
    received,
    setReply: (next) => {
      answer = next
    },
    waitFor: (count, timeoutMs = 15_000) =>
      received.length >= count ? Promise.resolve() : new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`receiver: ${received.length} of ${count} requests after ${timeoutMs} ms`)),
          timeoutMs
        )
        waiters.push({ count, resolve: () => (clearTimeout(timer), resolve()) })
      }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const timer of timers) clearTimeout(timer)
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

/** The receiver for the current scope. */
export const receiver = (reply?: (request: Received, n: number) => Reply) =>
  Effect.acquireRelease(Effect.promise(() => startReceiver(reply)), (r) => Effect.promise(() => r.close()))
