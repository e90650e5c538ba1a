/**
 * Transfers stream end to end (issue 28): a folder goes up as a tar and comes down again with
 * the resident memory of the API and the agent flat. Both run in this test's process (as the
 * client does, which generates the upload and counts the download without keeping either), so
 * any buffering anywhere on the way would show in this process's RSS, sampled every 50 ms.
 *
 * 512 MiB here rather than the 2 GiB: the 2 GiB figure takes minutes on the shared test
 * machine; it is measured by `bench/files.ts` (bench/README.md), which checks the same bound.
 */
import { expect, layer } from "@effect/vitest"
import * as TransferMemory from "@svc/host-protocol/TransferMemory"
import { tarHeader } from "@svc/testing/Tar"
import { Effect } from "effect"
import * as Http from "node:http"
import { Readable } from "node:stream"
import { eventually } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, waitState } from "../../testing/SandboxesEnv.ts"

const MiB = 1024 * 1024
const FILE_BYTES = 64 * MiB
const FILES = 8
/**
 * What the process may grow by while 512 MiB pass: the chunks in flight per hop plus the garbage
 * the collector has not returned yet (flat on a quiet machine; up to 107 MiB seen in a loaded CI
 * run, where collections come late). A transfer held whole would add its 512 MiB.
 */
const MAX_GROWTH = 160 * MiB

/** A tar of `FILES` files of `FILE_BYTES`, generated as it is read: never held. */
const generatedTar = () => {
  const chunk = Buffer.alloc(MiB, 0x61)
  return Readable.from(
    (function*() {
      yield tarHeader({ name: "data/", type: "5" }, 0)
      for (let i = 0; i < FILES; i++) {
        yield tarHeader({ name: `data/part-${i}.bin` }, FILE_BYTES)
        for (let sent = 0; sent < FILE_BYTES; sent += MiB) yield chunk
      }
      yield Buffer.alloc(1024)
    })(),
    { objectMode: false }
  )
}

/** The largest RSS seen while `work` runs. */
const peakRss = <A, E, R>(work: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    let peak = process.memoryUsage.rss()
    const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 50)
    const result = yield* Effect.ensuring(work, Effect.sync(() => clearInterval(timer)))
    return { result, peak: Math.max(peak, process.memoryUsage.rss()) }
  })

const request = (url: URL, token: string, method: string, path: string, body?: Readable) =>
  Effect.callback<{ status: number; bytes: number; text: string }>((resume) => {
    const req = Http.request({
      host: url.hostname,
      port: Number(url.port),
      method,
      path,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined ? { "content-type": "application/x-tar", "transfer-encoding": "chunked" } : {})
      }
    }, (res) => {
      let bytes = 0
      let text = ""
      res.on("data", (c: Buffer) => {
        bytes += c.length
        if (text.length < 1000) text += c.subarray(0, 1000).toString("utf8")
      })
      res.on("end", () => resume(Effect.succeed({ status: res.statusCode ?? 0, bytes, text })))
    })
    req.on("error", (e) => resume(Effect.die(e)))
    if (body === undefined) req.end()
    else body.pipe(req)
  })

layer(EnvLayer, { excludeTestServices: true, timeout: 600_000 })("transfers stream end to end", (it) => {
  it.effect("512 MiB of folder up and down: the API's and the agent's resident memory stay flat", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const url = new URL(env.base)
      const s = yield* create({ region: "local", ram_mb: 128, disk_gb: 2 })
      yield* waitState(s.id, "running")
      const path = `/v1/sandboxes/${s.id}/files/archive?path=/srv/up`
      // Warm: the routes, the clients and their pools exist before the baseline.
      const warm = yield* request(url, env.org.token, "GET", `/v1/sandboxes/${s.id}/files/archive?path=/etc`)
      expect(warm.status).toBe(200)
      globalThis.gc?.()
      const baseline = process.memoryUsage.rss()

      const up = yield* peakRss(request(url, env.org.token, "PUT", path, generatedTar()))
      expect(up.result.status, up.result.text).toBe(204)
      const down = yield* peakRss(request(url, env.org.token, "GET", path))
      expect(down.result.status).toBe(200)
      // Every byte came back: 8 files and their headers, the folder's header, the end blocks.
      expect(down.result.bytes).toBeGreaterThan(FILES * FILE_BYTES)

      const growth = Math.max(up.peak, down.peak) - baseline
      console.log(
        `rss baseline ${(baseline / MiB).toFixed(0)} MiB, peak up ${(up.peak / MiB).toFixed(0)} MiB, ` +
          `peak down ${(down.peak / MiB).toFixed(0)} MiB for ${(FILES * FILE_BYTES) / MiB} MiB each way`
      )
      expect(growth).toBeLessThan(MAX_GROWTH)
      // Both archives have ended for the API's and the agent's collections (TransferMemory.ts):
      // their check runs no more.
      yield* eventually(Effect.sync(TransferMemory.inFlightCount), (n) => n === 0, "10 seconds")
      expect(TransferMemory.active()).toBe(false)
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    }))
})
