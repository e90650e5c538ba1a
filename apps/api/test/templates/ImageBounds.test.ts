/**
 * The safety bounds of image pulls (apps/agent/src/ImagePulls.ts, @svc/host/Oci/Pull and
 * Registry) through the API, against the real test registries (apps/api/testing/Registries) with
 * small operator bounds set before the agent starts: a layer above `SVC_IMAGE_LAYER_MAX_MB`, an
 * image whose layers unpack past `SVC_IMAGE_MAX_MB` (layers pulled concurrently share the bound),
 * a decompression bomb (512 MiB of zeros in half a MiB of gzip) stopped at the bound, a registry
 * that stops sending mid-blob cut after `SVC_IMAGE_PULL_STALL_TIMEOUT`, and a registry name that
 * resolves to an address the operator did not allow. Each ends `failed` with a message that says
 * which; the last image, within the bounds, still builds.
 */
import { expect, layer } from "@effect/vitest"
import { tarHeader } from "@svc/testing/Tar"
import type { TestRegistry } from "@svc/testing/TestRegistry"
import { Effect, Layer } from "effect"
import { createHash, randomBytes } from "node:crypto"
import { once } from "node:events"
import * as Fs from "node:fs"
import * as Https from "node:https"
import type * as Net from "node:net"
import * as Zlib from "node:zlib"
import { build, push, Registries, settled, TestLayer } from "../../testing/Registries.ts"

const MIB = 1024 * 1024

// The operator's bounds, small enough for a test to pass them; set before the agent reads them.
const Bounds = Layer.effectDiscard(Effect.sync(() => {
  process.env["SVC_IMAGE_LAYER_MAX_MB"] = "4"
  process.env["SVC_IMAGE_MAX_MB"] = "6"
  process.env["SVC_IMAGE_PULL_STALL_TIMEOUT"] = "2s"
}))

/** A gzip layer whose tar holds one file of `size` zeros: tiny compressed, huge unpacked. */
const bomb = async (size: number) => {
  const gzip = Zlib.createGzip({ level: 9 })
  const parts: Array<Buffer> = []
  gzip.on("data", (chunk: Buffer) => parts.push(chunk))
  const ended = once(gzip, "end")
  const tarHash = createHash("sha256")
  const write = async (bytes: Buffer) => {
    tarHash.update(bytes)
    if (!gzip.write(bytes)) await once(gzip, "drain")
  }
  await write(tarHeader({ name: "srv/zeros" }, size))
  const zeros = Buffer.alloc(MIB)
  for (let i = 0; i < size / MIB; i++) await write(zeros)
  await write(Buffer.alloc(1024))
  gzip.end()
  await ended
  return { gzip: Buffer.concat(parts), diffId: `sha256:${tarHash.digest("hex")}` }
}

/**
 * An HTTPS front of `registry` under its certificate (so its name still verifies) that passes
 * everything through but sends only the first bytes of blobs whose path holds `stallOn`, then
 * nothing, the connection left open: a registry that stalls mid-download.
 */
const stallingFront = (registry: TestRegistry, stallOn: () => string | undefined) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const ca = Fs.readFileSync(registry.certificates.caFile)
      const sockets = new Set<Net.Socket>()
      const server = Https.createServer({
        cert: Fs.readFileSync(registry.certificates.serverCertFile),
        key: Fs.readFileSync(registry.certificates.serverKeyFile)
      }, (req, res) => {
        const upstream = Https.request({
          host: "127.0.0.1",
          port: registry.port,
          path: req.url,
          method: req.method,
          headers: { ...req.headers, host: `localhost:${registry.port}` },
          ca,
          servername: "localhost"
        }, (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers)
          const digest = stallOn()
          if (digest !== undefined && req.url?.includes(`/blobs/${digest}`)) {
            answer.once("data", (chunk: Buffer) => {
              res.write(chunk.subarray(0, 64))
              answer.destroy()
            })
            return
          }
          answer.pipe(res)
        })
        upstream.on("error", () => res.destroy())
        req.pipe(upstream)
      })
      server.on("secureConnection", (socket) => {
        sockets.add(socket)
        socket.on("close", () => sockets.delete(socket))
      })
      server.listen(0, "127.0.0.1")
      await once(server, "listening")
      return { server, sockets, port: (server.address() as Net.AddressInfo).port }
    }),
    ({ server, sockets }) =>
      Effect.sync(() => {
        for (const socket of sockets) socket.destroy()
        server.close()
      })
  )

layer(TestLayer.pipe(Layer.provideMerge(Bounds)), { excludeTestServices: true, timeout: 300_000 })(
  "image pulls: safety bounds",
  (it) => {
    it.effect("a layer above SVC_IMAGE_LAYER_MAX_MB, an image above SVC_IMAGE_MAX_MB, a decompression bomb: failed by the bound", () =>
      Effect.gen(function*() {
        const { open } = yield* Registries
        // 5 MiB of random bytes: 5 MiB compressed too, above the 4 MiB a layer may have.
        yield* push(open, "bounds/big-layer", "1", {
          layers: [{ files: { "srv/random": randomBytes(5 * MIB), "srv/": null } }]
        })
        const big = yield* build({ name: "big-layer", image: `${open.host}/bounds/big-layer:1` })
        const bigDone = yield* settled(big.id)
        expect(bigDone.state).toBe("failed")
        expect(bigDone.errorMessage).toMatch(
          /^layer sha256:[0-9a-f]{12} is 5 MiB, above the limit of 4 MiB \(SVC_IMAGE_LAYER_MAX_MB\)$/
        )

        // Three layers of 3 MiB each (a few KiB compressed), pulled concurrently: each within
        // its bound, together past the image's 6 MiB.
        const filler = (n: number) => ({ files: { [`srv/fill-${n}`]: `${n}`.repeat(3 * MIB), "srv/": null } })
        yield* push(open, "bounds/big-image", "1", { layers: [filler(1), filler(2), filler(3)] })
        const wide = yield* build({ name: "big-image", image: `${open.host}/bounds/big-image:1` })
        expect(yield* settled(wide.id)).toMatchObject({
          state: "failed",
          errorMessage: "the image unpacks to more than its limit (SVC_IMAGE_MAX_MB)"
        })

        // 512 MiB of zeros in about half a MiB: stopped when 4 MiB have come out, not when the
        // disk fills.
        const zeros = yield* Effect.promise(() => bomb(512 * MIB))
        expect(zeros.gzip.length).toBeLessThan(MIB)
        yield* push(open, "bounds/bomb", "1", { layers: [zeros] })
        const started = Date.now()
        const bombed = yield* build({ name: "bomb", image: `${open.host}/bounds/bomb:1` })
        const bombDone = yield* settled(bombed.id)
        expect(bombDone.state).toBe("failed")
        expect(bombDone.errorMessage).toMatch(
          /^layer sha256:[0-9a-f]{12} unpacks to more than 4 MiB \(SVC_IMAGE_LAYER_MAX_MB\)$/
        )
        // Unpacking 512 MiB and writing it would take far longer on this machine than the bound's stop.
        expect(Date.now() - started).toBeLessThan(60_000)

        // Within the bounds, the same registry's image builds.
        yield* push(open, "bounds/fits", "1", { layers: [filler(1)] })
        const fits = yield* build({ name: "fits", image: `${open.host}/bounds/fits:1` })
        expect((yield* settled(fits.id)).state).toBe("ready")
      }))

    it.effect("a registry that stops sending mid-blob: failed after SVC_IMAGE_PULL_STALL_TIMEOUT; a name resolving to a non-public address: refused", () =>
      Effect.gen(function*() {
        const { open } = yield* Registries
        let stallOn: string | undefined
        const front = yield* stallingFront(open, () => stallOn)
        const digest = yield* push(open, "bounds/stall", "1", {
          layers: [{ files: { "srv/stall": "x".repeat(256 * 1024), "srv/": null } }]
        })
        const manifest = JSON.parse(
          Fs.readFileSync(open.blobFile(digest), "utf8")
        ) as { layers: ReadonlyArray<{ digest: string }> }
        stallOn = manifest.layers[0]!.digest
        const started = Date.now()
        const stalled = yield* build({ name: "stall", image: `open.registry.test:${front.port}/bounds/stall:1` })
        expect(yield* settled(stalled.id)).toMatchObject({
          state: "failed",
          errorMessage: "the pull stalled: no byte from open.registry.test for 2 s"
        })
        expect(Date.now() - started).toBeLessThan(60_000)
        // The same front passing the blob whole: the image builds (the cut was the stall's).
        stallOn = undefined
        const passed = yield* build({ name: "stall-passed", image: `open.registry.test:${front.port}/bounds/stall:1` })
        expect((yield* settled(passed.id)).state).toBe("ready")

        // internal.registry.test resolves to 10.20.30.40; only loopback is allowed here.
        const internal = yield* build({ name: "internal-name", image: "internal.registry.test:5000/team/app:1" })
        expect(yield* settled(internal.id)).toMatchObject({
          state: "failed",
          errorMessage: "the registry host internal.registry.test resolves to a non-public address (private)"
        })
      }))
  }
)
