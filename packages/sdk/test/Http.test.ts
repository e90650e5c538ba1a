/**
 * The SDK's transport (`src/Http.ts`): a refusal that did nothing and says when to come back
 * (429 `rate_limited`, 503 `no_capacity`, each with `Retry-After`) is sent again after that
 * wait, a bounded number of times; other failures are thrown at once.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { Svc, SvcError } from "../src/index.ts"

interface Reply {
  readonly status: number
  readonly body: unknown
  readonly headers?: Record<string, string>
}

/** A stand-in API answering `replies` in order (the last one again once they run out). */
const standIn = async (replies: ReadonlyArray<Reply>) => {
  const seen: Array<string> = []
  const server = Http.createServer((request, response) => {
    request.resume()
    request.on("end", () => {
      seen.push(`${request.method} ${request.url}`)
      const reply = replies[Math.min(seen.length - 1, replies.length - 1)]!
      response.writeHead(reply.status, { "content-type": "application/json", ...reply.headers })
      response.end(JSON.stringify(reply.body))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    svc: (options: { maxRetries?: number; maxRetryWaitMs?: number } = {}) =>
      new Svc({ baseUrl: `http://127.0.0.1:${port}`, apiKey: "svc_live_test", ...options }),
    seen,
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

const noCapacity: Reply = {
  status: 503,
  body: { error: "no live host has room for cpu 1, ram_mb 512, disk_gb 1", code: "no_capacity", retry_after_s: 0 },
  headers: { "retry-after": "0" }
}
const record = { id: "sbx_1", name: "n", state: "pending" }

describe("Http retries", () => {
  it("a create refused with 503 no_capacity is sent again after Retry-After, then answered", async () => {
    const api = await standIn([noCapacity, { status: 429, body: {}, headers: { "retry-after": "0" } }, {
      status: 201,
      body: record
    }])
    try {
      const sandbox = await api.svc().sandboxes.create({}, { wait: false })
      expect(sandbox.id).toBe("sbx_1")
      expect(api.seen).toEqual(["POST /v1/sandboxes", "POST /v1/sandboxes", "POST /v1/sandboxes"])
    } finally {
      await api.close()
    }
  })

  it("bounded: after maxRetries the refusal is thrown with its code; a wait beyond maxRetryWaitMs is not waited", async () => {
    const api = await standIn([noCapacity])
    try {
      const error = await api.svc({ maxRetries: 2 }).sandboxes.create({}, { wait: false }).catch((e) => e)
      expect(error).toBeInstanceOf(SvcError)
      expect(error).toMatchObject({ status: 503, code: "no_capacity" })
      expect(api.seen.length).toBe(3)
    } finally {
      await api.close()
    }
    const later = await standIn([{ ...noCapacity, headers: { "retry-after": "3600" } }])
    try {
      const error = await later.svc({ maxRetryWaitMs: 5_000 }).sandboxes.create({}, { wait: false }).catch((e) => e)
      expect(error).toMatchObject({ status: 503, code: "no_capacity" })
      expect(later.seen.length).toBe(1)
    } finally {
      await later.close()
    }
  })

  it("a 503 without Retry-After (a dependency down while it ran) is thrown at once, never sent twice", async () => {
    const api = await standIn([{ status: 503, body: { error: "down", code: "unavailable" } }, {
      status: 201,
      body: record
    }])
    try {
      const error = await api.svc().sandboxes.create({}, { wait: false }).catch((e) => e)
      expect(error).toMatchObject({ status: 503, code: "unavailable" })
      expect(api.seen.length).toBe(1)
    } finally {
      await api.close()
    }
  })
})
