/**
 * The env in `sandbox.json` is sealed: the file never holds it in the clear (create, adopt, a
 * record from before sealing rewritten at driver start), execs still get it (also after stop,
 * start and a restarted driver), and a record whose env does not open with this driver's keys
 * is still listed and destroyed, while an exec on it fails without saying what the env holds.
 */
import { assert, describe, it } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { makeTestDriver, sh, spec, text, uniqueId } from "./fixtures/support.ts"

const canary = () => `canary-${randomBytes(16).toString("hex")}`

const recordOf = (dataDir: string, sandboxId: string) => NodePath.join(dataDir, "sandboxes", sandboxId, "sandbox.json")

/** Every byte under the sandbox's folder but its own file system (disk.img and its mount point, root/). */
const hostFilesOf = async (dataDir: string, sandboxId: string) => {
  const dir = NodePath.join(dataDir, "sandboxes", sandboxId)
  const names = (await Fs.readdir(dir)).filter((name) => !["disk.img", "disk", "upper", "work", "root"].includes(name))
  return Buffer.concat(await Promise.all(names.map((name) => Fs.readFile(NodePath.join(dir, name)))))
}

const printed = (driver: Effect.Success<ReturnType<typeof makeTestDriver>>["driver"], sandboxId: string) =>
  Effect.map(driver.exec(sandboxId, sh(`printf %s "$SECRET"`)), (r) => text(r.stdout))

describe("SandboxDriver: the env at rest (bubblewrap)", () => {
  it.live("create and adopt keep the env sealed in sandbox.json; execs get it, after stop/start and a restarted driver too", () =>
    Effect.scoped(Effect.gen(function*() {
      const { driver, dataDir, hostId } = yield* makeTestDriver()
      const value = canary()
      const id = uniqueId("sealed")
      yield* driver.create(spec(id, { env: { SECRET: value } }))
      const stored = JSON.parse(yield* Effect.promise(() => Fs.readFile(recordOf(dataDir, id), "utf8")))
      assert.match(stored.sealedEnv, /^v1\./)
      assert.notProperty(stored, "env")
      assert.notInclude((yield* Effect.promise(() => hostFilesOf(dataDir, id))).toString("latin1"), value)
      assert.strictEqual(yield* printed(driver, id), value)

      yield* driver.stop(id)
      yield* driver.start(id)
      assert.strictEqual(yield* printed(driver, id), value)

      const poolId = uniqueId("pool")
      const adoptedId = uniqueId("adopted")
      const adoptedValue = canary()
      yield* driver.create(spec(poolId))
      yield* driver.adopt(poolId, spec(adoptedId, { env: { SECRET: adoptedValue } }))
      assert.notInclude((yield* Effect.promise(() => hostFilesOf(dataDir, adoptedId))).toString("latin1"), adoptedValue)
      assert.strictEqual(yield* printed(driver, adoptedId), adoptedValue)

      // Another driver process on the same data dir opens what the first one sealed.
      const restarted = yield* makeTestDriver({ dataDir, hostId })
      assert.strictEqual(yield* printed(restarted.driver, id), value)
      assert.strictEqual(yield* printed(restarted.driver, adoptedId), adoptedValue)
    })))

  it.live("a sandbox.json from before sealing is sealed when a driver starts; the sandbox keeps its env", () =>
    Effect.scoped(Effect.gen(function*() {
      const first = yield* makeTestDriver()
      const value = canary()
      const id = uniqueId("legacy")
      yield* first.driver.create(spec(id, { env: { SECRET: value } }))
      // The record as the driver wrote it before this version: the env in the clear.
      const file = recordOf(first.dataDir, id)
      const { sealedEnv: _, ...fields } = JSON.parse(yield* Effect.promise(() => Fs.readFile(file, "utf8")))
      yield* Effect.promise(() => Fs.writeFile(file, JSON.stringify({ ...fields, env: { SECRET: value } })))

      const second = yield* makeTestDriver({ dataDir: first.dataDir, hostId: first.hostId })
      const rewritten = yield* Effect.promise(() => Fs.readFile(file, "utf8"))
      assert.notInclude(rewritten, value)
      assert.match(JSON.parse(rewritten).sealedEnv, /^v1\./)
      assert.strictEqual(yield* printed(second.driver, id), value)
    })))

  it.live("an env that does not open with the driver's keys: listed and destroyed, an exec fails without the value", () =>
    Effect.scoped(Effect.gen(function*() {
      const first = yield* makeTestDriver()
      const value = canary()
      const id = uniqueId("otherkey")
      yield* first.driver.create(spec(id, { env: { SECRET: value } }))
      const other = yield* makeTestDriver({
        dataDir: first.dataDir,
        hostId: first.hostId,
        secrets: SecretBox.layerWith([{ id: "other", key: new Uint8Array(randomBytes(32)) }])
      })
      const listed = yield* other.driver.list
      assert.deepStrictEqual(listed.map((r) => [r.sandboxId, r.status]), [[id, "running"]])
      const refused = yield* Effect.flip(other.driver.exec(id, sh("true")))
      assert.strictEqual(refused._tag, "DriverFailure")
      assert.include(refused.message, "unknown_key")
      assert.notInclude(refused.message, value)
      yield* other.driver.destroy(id)
      assert.deepStrictEqual(yield* other.driver.list, [])
    })))
})
