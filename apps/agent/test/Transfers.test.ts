/**
 * The data plane's bound on file transfers (`maxTransfers`), with a real agent and sandbox: a
 * transfer beyond the bound waits for a slot, and is refused with 503 `busy` once the wait is
 * over; a client that goes away frees its slot and ends its processes in the sandbox. One org
 * (`?org=`, as the API names it) past its share is 429 at once while another org's transfer is
 * served, and a transfer that moves nothing for `transferIdleMs` is cut, its slot freed.
 */
import { assert, layer } from "@effect/vitest"
import { processesOfHost } from "@svc/testing/HostProcesses"
import { Effect, Fiber } from "effect"
import { createHash } from "node:crypto"
import * as Http from "node:http"
import {
  createRunning,
  eventually,
  http,
  makeHost,
  type RunningAgent,
  startAgent,
  testLayer
} from "../testing/Agent.ts"

const BIG = 64 * 1024 * 1024

/**
 * A download whose client reads nothing until `resume` (its bytes back up to the sandbox);
 * `done` resolves with the SHA-1 and size of what it read, `cut` destroys it.
 */
const heldDownload = (agent: RunningAgent, path: string) =>
  Effect.callback<{
    readonly status: number
    readonly resume: () => void
    readonly cut: () => void
    readonly done: Promise<{ sha1: string; bytes: number }>
  }>((resume) => {
    const url = new URL(agent.dataPlane.endpoint)
    const req = Http.request({
      host: url.hostname,
      port: Number(url.port),
      path,
      agent: false,
      headers: { authorization: `Bearer ${agent.dataPlane.token}` }
    })
    req.on("error", () => undefined)
    req.on("response", (res) => {
      res.pause()
      const hash = createHash("sha1")
      let bytes = 0
      const done = new Promise<{ sha1: string; bytes: number }>((resolveDone) => {
        res.on("data", (chunk: Buffer) => {
          hash.update(chunk)
          bytes += chunk.length
        })
        res.on("end", () => resolveDone({ sha1: hash.digest("hex"), bytes }))
      })
      resume(
        Effect.succeed({ status: res.statusCode ?? 0, resume: () => res.resume(), cut: () => req.destroy(), done })
      )
    })
    req.end()
  })

layer(testLayer, { excludeTestServices: true, timeout: 120_000 })("agent file transfers", (it) => {
  it.effect("beyond maxTransfers a transfer waits for a slot and gets it once one ends", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host, { dataPlane: { maxTransfers: 1, transferWaitMs: 30_000 } })
      const sandboxId = yield* createRunning(agent, { ramMb: 256 })
      const made = yield* http(agent, `/sandboxes/${sandboxId}/exec`, {
        method: "POST",
        body: JSON.stringify({ cmd: ["sh", "-c", `head -c ${BIG} /dev/urandom > /root/big && sha1sum /root/big`] })
      })
      const sha1 = made.json.stdout.split(" ")[0]

      const first = yield* heldDownload(agent, `/sandboxes/${sandboxId}/files?path=/root/big`)
      assert.strictEqual(first.status, 200)
      let secondAnswered = false
      const secondFiber = yield* Effect.forkChild(
        heldDownload(agent, `/sandboxes/${sandboxId}/files?path=/root/big`).pipe(
          Effect.tap(() => Effect.sync(() => (secondAnswered = true)))
        )
      )
      yield* Effect.sleep("1 second")
      // Held by the first transfer: the second has not even had its headers.
      assert.isFalse(secondAnswered)
      first.resume()
      assert.deepStrictEqual(yield* Effect.promise(() => first.done), { sha1, bytes: BIG })
      const second = yield* Fiber.join(secondFiber)
      assert.strictEqual(second.status, 200)
      second.resume()
      assert.deepStrictEqual(yield* Effect.promise(() => second.done), { sha1, bytes: BIG })
    }))

  it.effect("past the wait a transfer is 503 busy; a client that goes away frees its slot and its processes", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host, { dataPlane: { maxTransfers: 1, transferWaitMs: 300 } })
      const sandboxId = yield* createRunning(agent, { ramMb: 256 })
      yield* http(agent, `/sandboxes/${sandboxId}/exec`, {
        method: "POST",
        body: JSON.stringify({ cmd: ["sh", "-c", `head -c ${BIG} /dev/zero > /root/big`] })
      })
      const idle = processesOfHost(host.hostId).length

      const held = yield* heldDownload(agent, `/sandboxes/${sandboxId}/files?path=/root/big`)
      assert.strictEqual(held.status, 200)
      // Its reader runs in the sandbox while the client holds it.
      assert.isAbove(processesOfHost(host.hostId).length, idle)
      for (const [method, path] of [["GET", "/root/big"], ["PUT", "/root/other"]] as const) {
        const busy = yield* http(agent, `/sandboxes/${sandboxId}/files?path=${path}`, {
          method,
          ...(method === "PUT" ? { body: "x" } : {})
        })
        assert.strictEqual(busy.status, 503, busy.text)
        assert.strictEqual(busy.json.reason, "busy")
      }
      // Exec is not a transfer: it still runs.
      const exec = yield* http(agent, `/sandboxes/${sandboxId}/exec`, {
        method: "POST",
        body: JSON.stringify({ cmd: ["true"] })
      })
      assert.strictEqual(exec.status, 200)

      held.cut()
      yield* eventually(Effect.sync(() => processesOfHost(host.hostId).length), (n) => n === idle)
      const put = yield* http(agent, `/sandboxes/${sandboxId}/files?path=/root/other`, { method: "PUT", body: "after" })
      assert.strictEqual(put.status, 204, put.text)
      assert.strictEqual((yield* http(agent, `/sandboxes/${sandboxId}/files?path=/root/other`)).text, "after")
    }))

  it.effect("an org past its share is 429 at once while another org's transfer is served; an idle transfer is cut and its slot freed", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host, {
        dataPlane: { maxTransfers: 3, maxTransfersPerOrg: 2, transferWaitMs: 30_000, transferIdleMs: 1_000 }
      })
      const sandboxId = yield* createRunning(agent, { ramMb: 256 })
      yield* http(agent, `/sandboxes/${sandboxId}/exec`, {
        method: "POST",
        body: JSON.stringify({ cmd: ["sh", "-c", `head -c ${BIG} /dev/zero > /root/big && echo b > /root/small`] })
      })
      const idle = processesOfHost(host.hostId).length
      const files = (org: string, path: string) => `/sandboxes/${sandboxId}/files?path=${path}&org=${org}`

      // Org A's two downloads, read by nobody, hold its share.
      const held = [
        yield* heldDownload(agent, files("org_a", "/root/big")),
        yield* heldDownload(agent, files("org_a", "/root/big"))
      ]
      assert.deepStrictEqual(held.map((h) => h.status), [200, 200])
      const third = yield* http(agent, files("org_a", "/root/small"))
      assert.strictEqual(third.status, 429, third.text)
      assert.strictEqual(third.json.reason, "rate_limited")
      // Org B is served while A's are held (the host has a slot A cannot take): their readers
      // still run in the sandbox after B's answer.
      const other = yield* http(agent, files("org_b", "/root/small"))
      assert.strictEqual(other.status, 200, other.text)
      assert.strictEqual(other.text, "b\n")
      assert.isAbove(processesOfHost(host.hostId).length, idle)

      // Nothing moves on A's (their clients read nothing): the idle timeout cuts both, their
      // readers in the sandbox end, and A's share is free again.
      yield* eventually(Effect.sync(() => processesOfHost(host.hostId).length), (n) => n === idle)
      const again = yield* Effect.all([1, 2].map(() => http(agent, files("org_a", "/root/small"))), {
        concurrency: 2
      })
      assert.deepStrictEqual(again.map((r) => [r.status, r.text]), [[200, "b\n"], [200, "b\n"]])
      for (const h of held) h.cut()
    }))
})
