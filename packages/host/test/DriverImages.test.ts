/**
 * Images on the driver (`src/Driver/Images.ts`): a sandbox's writable layer exported as a layer
 * and stacked under a new sandbox (files, deletions, modes), a fork's snapshot not listed among
 * the image layers (the agent drops a listed layer its image store lacks), the `debian` root
 * built once (the test cache folder is shared by the whole run) with python3 inside, and a layer
 * extracted as its tar streams in (a pulled image's), in place only once committed.
 */
import { assert, describe, it } from "@effect/vitest"
import { TEST_IMAGE_CACHE_DIR } from "@svc/testing/ImageCache"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { digestFile, packLayer } from "../src/ImageLayers.ts"
import { makeTestDriver, sh, spec, text, uniqueId, withSandbox } from "./fixtures/support.ts"

describe("SandboxDriver images (bubblewrap)", () => {
  it.effect("a writable layer exported, imported and stacked under another sandbox", () =>
    Effect.gen(function*() {
      const { driver, dataDir } = yield* makeTestDriver()
      const first = uniqueId("img")
      yield* withSandbox(driver, spec(first))
      const made = yield* driver.exec(
        first,
        sh("mkdir -p /opt/app && echo hello > /opt/app/greeting && chmod 640 /opt/app/greeting && rm /etc/os-release")
      )
      assert.strictEqual(made.exitCode, 0, text(made.stderr))
      const file = NodePath.join(dataDir, "export", "layer.tar")
      yield* driver.exportLayer(first, file)
      const digest = yield* Effect.promise(() => digestFile(file))
      assert.isFalse(yield* driver.hasLayer(digest))
      yield* driver.importLayer(digest, file)
      assert.isTrue(yield* driver.hasLayer(digest))
      assert.deepStrictEqual(yield* driver.layers, [digest])
      // A fork's snapshot is extracted like a layer but is no image layer: not listed.
      const fork = randomBytes(32).toString("hex")
      yield* driver.snapshotLayer(first, fork)
      assert.isTrue(yield* driver.hasLayer(fork))
      assert.deepStrictEqual(yield* driver.layers, [digest])

      // A tar that is not what its name says is refused.
      yield* Effect.promise(() => Fs.appendFile(file, "x"))
      const wrong = yield* Effect.flip(driver.importLayer("0".repeat(64), file))
      assert.strictEqual(wrong._tag, "DriverFailure")

      const second = uniqueId("img")
      yield* withSandbox(driver, spec(second, { layers: [digest] }))
      const seen = yield* driver.exec(
        second,
        sh(
          "cat /opt/app/greeting; stat -c '%a %u' /opt/app/greeting; test -e /etc/os-release && echo present || echo gone"
        )
      )
      assert.strictEqual(text(seen.stdout), "hello\n640 0\ngone\n")
      // The layer is read-only below the sandbox: its changes stay its own.
      yield* driver.exec(second, sh("echo changed > /opt/app/greeting"))
      const third = uniqueId("img")
      yield* withSandbox(driver, spec(third, { layers: [digest] }))
      assert.strictEqual(text((yield* driver.exec(third, sh("cat /opt/app/greeting"))).stdout), "hello\n")

      const missing = yield* Effect.flip(driver.create(spec(uniqueId("img"), { layers: ["1".repeat(64)] })))
      assert.strictEqual(missing._tag, "TemplateNotFound")
    }).pipe(Effect.scoped), 120_000)

  it.effect(
    "a layer extracted as it arrives: hidden until commit with its digest; abort leaves nothing",
    () =>
      Effect.gen(function*() {
        const { driver, dataDir, config } = yield* makeTestDriver()
        const source = NodePath.join(dataDir, "source")
        const file = NodePath.join(dataDir, "layer.tar")
        yield* Effect.promise(async () => {
          await Fs.mkdir(NodePath.join(source, "srv"), { recursive: true })
          await Fs.writeFile(NodePath.join(source, "srv", "data"), randomBytes(3 * 1024 * 1024))
          await packLayer(source, file, config.uidBase, dataDir)
        })
        const bytes = yield* Effect.promise(() => Fs.readFile(file))
        const digest = yield* Effect.promise(() => digestFile(file))
        const hidden = () =>
          Effect.promise(async () =>
            (await Fs.readdir(NodePath.join(dataDir, "layers"))).filter((name) => name.startsWith("."))
          )

        const importing = yield* driver.beginLayerImport
        for (let at = 0; at < bytes.length; at += 64 * 1024) {
          yield* Effect.promise(async () => importing.write(bytes.subarray(at, at + 64 * 1024)))
        }
        assert.isFalse(yield* driver.hasLayer(digest))
        assert.deepStrictEqual(yield* driver.layers, [])
        yield* Effect.promise(() => importing.commit(digest))
        assert.deepStrictEqual(yield* driver.layers, [digest])
        const stored = NodePath.join(dataDir, "layers", digest, "srv", "data")
        const st = yield* Effect.promise(() => Fs.stat(stored))
        assert.strictEqual(st.size, 3 * 1024 * 1024)
        // Owners shifted into the sandboxes' range, as `importLayer` does.
        assert.strictEqual(st.uid, config.uidBase)
        assert.deepStrictEqual(yield* hidden(), [])

        // Aborted halfway (the source failed its check): nothing stays, under any name.
        const dropped = yield* driver.beginLayerImport
        yield* Effect.promise(async () => dropped.write(bytes.subarray(0, bytes.length >> 1)))
        yield* Effect.promise(() => dropped.abort())
        assert.deepStrictEqual(yield* driver.layers, [digest])
        assert.deepStrictEqual(yield* hidden(), [])

        // A stream that is not a tar fails at its commit, and leaves nothing either.
        const garbage = yield* driver.beginLayerImport
        yield* Effect.promise(async () => garbage.write(randomBytes(4096)))
        const refused = yield* Effect.flip(Effect.tryPromise(() => garbage.commit("1".repeat(64))))
        assert.match(String(refused.cause), /tar/)
        assert.isFalse(yield* driver.hasLayer("1".repeat(64)))
        assert.deepStrictEqual(yield* hidden(), [])
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect("the debian root: built once per cache folder, python3 and apt inside", () =>
    Effect.gen(function*() {
      const { driver } = yield* makeTestDriver({ driverConfig: { imageCacheDir: TEST_IMAGE_CACHE_DIR } })
      const template = yield* driver.prepareRoot("debian")
      assert.match(template, /^debian-[0-9a-f]{24}$/)
      assert.strictEqual(yield* driver.prepareRoot("debian"), template)
      const id = uniqueId("deb")
      yield* withSandbox(driver, spec(id, { template }))
      const python = yield* driver.exec(id, sh("python3 -c 'import sys; print(sys.version_info[0])'; id -u"))
      assert.strictEqual(text(python.stdout), "3\n0\n", text(python.stderr))
      const apt = yield* driver.exec(id, sh("command -v apt-get; command -v curl; cat /etc/debian_version"))
      assert.strictEqual(apt.exitCode, 0, text(apt.stderr))
      assert.match(text(apt.stdout), /apt-get\n.*curl\n\d+/)
    }).pipe(Effect.scoped), 900_000) // the first build of the archive takes a minute or two
})
