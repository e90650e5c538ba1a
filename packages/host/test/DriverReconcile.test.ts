import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { DriverExecRequest } from "../src/Driver.ts"
import { vethNames } from "../src/Driver/Network.ts"
import {
  cgroupDirs,
  interfaceExists,
  makeTestDriver,
  processExists,
  spec,
  text,
  uniqueId,
  withSandbox
} from "./fixtures/support.ts"

const agentScript = NodePath.join(NodePath.dirname(fileURLToPath(import.meta.url)), "fixtures", "agent.ts")

/** Runs the fixture agent until it reports its sandbox; the release kills it if still alive. */
const runAgent = (dataDir: string, hostId: string, sandboxId: string) =>
  Effect.acquireRelease(
    Effect.callback<{ child: ReturnType<typeof spawn>; pid: number; internalIp: string }, Error>((resume) => {
      const child = spawn(process.execPath, [agentScript, dataDir, hostId, sandboxId], {
        stdio: ["ignore", "pipe", "pipe"]
      })
      let out = ""
      let err = ""
      child.stderr!.on("data", (chunk: Buffer) => (err += chunk.toString()))
      child.stdout!.on("data", (chunk: Buffer) => {
        out += chunk.toString()
        const line = out.split("\n")[0]
        if (out.includes("\n") && line !== undefined) {
          const parsed = JSON.parse(line) as { pid: number; internalIp: string }
          resume(Effect.succeed({ child, ...parsed }))
        }
      })
      child.on("exit", (code) => resume(Effect.fail(new Error(`agent exited ${code}: ${err}`))))
    }),
    ({ child }) => Effect.sync(() => child.kill("SIGKILL"))
  )

const waitExit = (child: ReturnType<typeof spawn>) =>
  Effect.callback<void>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) resume(Effect.void)
    else child.on("exit", () => resume(Effect.void))
  })

describe("SandboxDriver reconcile and neighbours", () => {
  it.live("a sandbox survives its agent being killed -9; a restarted agent finds and drives it", () =>
    Effect.gen(function*() {
      const restarted = yield* makeTestDriver()
      const id = uniqueId("survivor")
      const agent = yield* runAgent(restarted.dataDir, restarted.hostId, id)
      agent.child.kill("SIGKILL")
      yield* waitExit(agent.child)
      assert.isTrue(processExists(agent.pid))

      // The driver below was built before the sandbox existed: all it knows comes from disk.
      const rows = yield* restarted.driver.list
      assert.deepStrictEqual(rows.map((row) => [row.sandboxId, row.status, row.pid, row.internalIp]), [
        [id, "running", agent.pid, agent.internalIp]
      ])
      const result = yield* restarted.driver.exec(
        id,
        new DriverExecRequest({ cmd: ["sh", "-c", "cat /root/from-first-agent; echo \" $AGENT\""] })
      )
      assert.strictEqual(text(result.stdout), "still here first\n")

      // A third, completely fresh instance over the same data dir sees the same.
      const fresh = yield* makeTestDriver({ dataDir: restarted.dataDir, hostId: restarted.hostId })
      assert.deepStrictEqual((yield* fresh.driver.list).map((row) => row.status), ["running"])
      yield* fresh.driver.destroy(id)
      assert.isFalse(processExists(agent.pid))
      assert.isFalse(interfaceExists(vethNames(agent.internalIp).host))
      for (const dir of cgroupDirs(restarted.hostId, id)) assert.isFalse(FsSync.existsSync(dir), dir)
      assert.deepStrictEqual(yield* restarted.driver.list, [])
    }))

  it.live("reports a sandbox whose processes died behind its back as stopped, and starts it again", () =>
    Effect.gen(function*() {
      const { driver, hostId } = yield* makeTestDriver()
      const id = uniqueId("crashed")
      const info = yield* withSandbox(driver, spec(id))
      yield* driver.writeFile(id, "/root/kept", new TextEncoder().encode("kept"))
      process.kill(info.pid!, "SIGKILL")
      while (processExists(info.pid!)) yield* Effect.sleep(10)
      assert.deepStrictEqual((yield* driver.list).map((row) => row.status), ["stopped"])
      assert.strictEqual(
        (yield* Effect.flip(driver.exec(id, new DriverExecRequest({ cmd: ["true"] }))))._tag,
        "SandboxNotRunning"
      )
      const again = yield* driver.start(id)
      assert.strictEqual(again.internalIp, info.internalIp)
      assert.strictEqual(text(yield* driver.readFile(id, "/root/kept")), "kept")
      assert.isTrue(cgroupDirs(hostId, id).every((dir) => FsSync.existsSync(dir)))
    }))

  it.live("two agents on one machine work side by side without clashing", () =>
    Effect.gen(function*() {
      const one = yield* makeTestDriver()
      const two = yield* makeTestDriver()
      const id = uniqueId("same-id")
      // The same sandbox id on two hosts: separate folders, cgroups and addresses.
      const [a, b] = yield* Effect.all([
        withSandbox(one.driver, spec(id)),
        withSandbox(two.driver, spec(id))
      ], { concurrency: 2 })
      assert.notStrictEqual(a.internalIp, b.internalIp)
      assert.deepStrictEqual((yield* one.driver.list).map((row) => row.pid), [a.pid])
      assert.deepStrictEqual((yield* two.driver.list).map((row) => row.pid), [b.pid])
      yield* one.driver.writeFile(id, "/root/who", new TextEncoder().encode("one"))
      yield* two.driver.writeFile(id, "/root/who", new TextEncoder().encode("two"))
      assert.strictEqual(text(yield* one.driver.readFile(id, "/root/who")), "one")
      assert.strictEqual(text(yield* two.driver.readFile(id, "/root/who")), "two")
      yield* one.driver.destroy(id)
      assert.isTrue(processExists(b.pid!))
      assert.strictEqual((yield* two.driver.exec(id, new DriverExecRequest({ cmd: ["hostname"] }))).exitCode, 0)
      assert.isTrue(cgroupDirs(two.hostId, id).every((dir) => FsSync.existsSync(dir)))
    }))
})
