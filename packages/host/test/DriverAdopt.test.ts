/** `adopt`: a running sandbox (a warm pool entry) takes another id and the spec's settings. */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { DriverExecRequest } from "../src/Driver.ts"
import { vethNames } from "../src/Driver/Network.ts"
import { cgroupDirs, interfaceExists, processExists, spec, TestDriver, text, uniqueId } from "./fixtures/support.ts"

layer(TestDriver.layer(), { excludeTestServices: true })("SandboxDriver.adopt (bubblewrap)", (it) => {
  it.effect("renames a running sandbox and applies env, limits and hostname; destroy leaves nothing", () =>
    Effect.gen(function*() {
      const { driver, dataDir, hostId } = yield* TestDriver
      const poolId = uniqueId("pool")
      const id = uniqueId("adopted")
      const made = yield* driver.create(spec(poolId, { ramMb: 256 }))
      const info = yield* driver.adopt(
        poolId,
        spec(id, { ramMb: 96, cpu: 2, env: { GREETING: "hi there" }, exposedPorts: [8080] })
      ).pipe(
        Effect.tapError(() => Effect.all([driver.destroy(poolId), driver.destroy(id)]).pipe(Effect.ignore))
      )
      yield* Effect.addFinalizer(() => driver.destroy(id).pipe(Effect.ignore))
      assert.strictEqual(info.sandboxId, id)
      assert.strictEqual(info.pid, made.pid)
      assert.strictEqual(info.internalIp, made.internalIp)
      assert.strictEqual(info.limits.memory, "applied")

      const out = yield* driver.exec(
        id,
        new DriverExecRequest({ cmd: ["sh", "-c", "echo $GREETING; hostname; echo $HOSTNAME"] })
      )
      assert.strictEqual(text(out.stdout), `hi there\n${id}\n${id}\n`)
      const [memory, cpu] = cgroupDirs(hostId, id)
      assert.strictEqual(
        FsSync.readFileSync(NodePath.join(memory!, "memory.limit_in_bytes"), "utf8").trim(),
        String(96 * 1024 * 1024)
      )
      assert.strictEqual(FsSync.readFileSync(NodePath.join(cpu!, "cpu.cfs_quota_us"), "utf8").trim(), "200000")
      for (const dir of cgroupDirs(hostId, poolId)) assert.isFalse(FsSync.existsSync(dir))
      const listing = yield* driver.list
      assert.deepStrictEqual(
        listing.filter((r) => r.sandboxId === id || r.sandboxId === poolId).map((r) => [r.sandboxId, r.status]),
        [[id, "running"]]
      )
      // The old id is gone: exec on it is refused, adopt of it again too.
      const old = yield* Effect.flip(driver.exec(poolId, new DriverExecRequest({ cmd: ["true"] })))
      assert.strictEqual(old._tag, "SandboxNotFound")
      const again = yield* Effect.flip(driver.adopt(poolId, spec(uniqueId("twice"))))
      assert.strictEqual(again._tag, "SandboxNotFound")

      yield* driver.destroy(id)
      assert.isFalse(processExists(made.pid!))
      assert.isFalse(interfaceExists(vethNames(made.internalIp).host))
      for (const dir of [...cgroupDirs(hostId, id), ...cgroupDirs(hostId, poolId)]) {
        assert.isFalse(FsSync.existsSync(dir))
      }
      assert.isFalse(FsSync.existsSync(NodePath.join(dataDir, "sandboxes", id)))
    }))

  it.effect("refuses another template, a taken id, a stopped sandbox; the source stays usable", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const poolId = uniqueId("pool")
      const other = uniqueId("taken")
      yield* Effect.addFinalizer(() => Effect.all([driver.destroy(poolId), driver.destroy(other)]).pipe(Effect.ignore))
      yield* driver.create(spec(poolId))
      yield* driver.create(spec(other))
      const template = yield* Effect.flip(driver.adopt(poolId, spec(uniqueId("t"), { template: "no-such" })))
      assert.strictEqual(template._tag, "InvalidSandboxRequest")
      const taken = yield* Effect.flip(driver.adopt(poolId, spec(other)))
      assert.strictEqual(taken._tag, "SandboxAlreadyExists")
      const bad = yield* Effect.flip(driver.adopt("../x", spec(uniqueId("b"))))
      assert.strictEqual(bad._tag, "InvalidSandboxRequest")
      assert.strictEqual((yield* driver.exec(poolId, new DriverExecRequest({ cmd: ["true"] }))).exitCode, 0)
      yield* driver.stop(poolId)
      const stopped = yield* Effect.flip(driver.adopt(poolId, spec(uniqueId("s"))))
      assert.strictEqual(stopped._tag, "SandboxNotRunning")
    }))

  it.effect("a crash right after the folder's rename: destroy of the new id removes everything", () =>
    Effect.gen(function*() {
      const { driver, dataDir, hostId } = yield* TestDriver
      const poolId = uniqueId("pool")
      const id = uniqueId("half")
      yield* Effect.addFinalizer(() => Effect.all([driver.destroy(poolId), driver.destroy(id)]).pipe(Effect.ignore))
      const made = yield* driver.create(spec(poolId))
      // What `adopt` does first, and then the process dies.
      yield* Effect.promise(() =>
        Fs.rename(NodePath.join(dataDir, "sandboxes", poolId), NodePath.join(dataDir, "sandboxes", id))
      )
      yield* driver.destroy(id)
      assert.isFalse(processExists(made.pid!))
      assert.isFalse(interfaceExists(vethNames(made.internalIp).host))
      for (const dir of [...cgroupDirs(hostId, id), ...cgroupDirs(hostId, poolId)]) {
        assert.isFalse(FsSync.existsSync(dir))
      }
      assert.deepStrictEqual(
        yield* Effect.promise(() => Fs.readdir(NodePath.join(dataDir, "sandboxes"))).pipe(
          Effect.map((names) => names.filter((n) => n === id || n === poolId))
        ),
        []
      )
    }))
})
