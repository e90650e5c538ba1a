/** The driver's whole life of a sandbox, its refusals, its isolation and its configuration. */
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import { DriverConfig } from "../src/Driver/Config.ts"
import { vethNames } from "../src/Driver/Network.ts"
import {
  cgroupDirs,
  exec,
  interfaceExists,
  processExists,
  sh,
  spec,
  TestDriver,
  text,
  uniqueId,
  withSandbox
} from "./fixtures/support.ts"

layer(TestDriver.layer(), { excludeTestServices: true })("SandboxDriver (bubblewrap)", (it) => {
  it.effect("lives a whole life: create, exec, files, stop, start, destroy, nothing left", () =>
    Effect.gen(function*() {
      const { driver, dataDir, hostId } = yield* TestDriver
      const id = uniqueId("life")
      const info = yield* driver.create(spec(id, { ramMb: 128 }))
      assert.match(info.internalIp, /^10\.213\.\d+\.\d+$/)
      assert.isDefined(info.pid)
      const pid = info.pid!
      assert.isTrue(processExists(pid))
      const { host: veth } = vethNames(info.internalIp)
      assert.isTrue(interfaceExists(veth))
      assert.strictEqual(info.limits.memory, "applied")

      const echo = yield* driver.exec(id, exec(["echo", "hello", "sandbox"]))
      assert.strictEqual(echo.exitCode, 0)
      assert.strictEqual(text(echo.stdout), "hello sandbox\n")
      assert.isFalse(echo.timedOut)

      yield* driver.writeFile(id, "/root/notes/a.txt", new TextEncoder().encode("kept across stop"))
      assert.strictEqual(text(yield* driver.readFile(id, "/root/notes/a.txt")), "kept across stop")
      const entries = yield* driver.listDir(id, "/root/notes")
      assert.deepStrictEqual(entries.map((e) => [e.name, e.type, e.size]), [["a.txt", "file", 16]])
      assert.strictEqual((yield* driver.stat(id, "/root/notes")).type, "dir")

      const listed = yield* driver.list
      assert.deepStrictEqual(listed.map((row) => [row.sandboxId, row.status]), [[id, "running"]])

      yield* driver.stop(id)
      yield* driver.stop(id)
      assert.isFalse(processExists(pid))
      assert.isFalse(interfaceExists(veth))
      for (const dir of cgroupDirs(hostId, id)) assert.isFalse(FsSync.existsSync(dir), dir)
      assert.deepStrictEqual((yield* driver.list).map((row) => row.status), ["stopped"])
      const notRunning = yield* Effect.flip(driver.exec(id, exec(["true"])))
      assert.strictEqual(notRunning._tag, "SandboxNotRunning")

      const again = yield* driver.start(id)
      assert.strictEqual(again.internalIp, info.internalIp)
      assert.notStrictEqual(again.pid, pid)
      assert.strictEqual(text(yield* driver.readFile(id, "/root/notes/a.txt")), "kept across stop")
      // start on a running sandbox leaves it as it is.
      assert.strictEqual((yield* driver.start(id)).pid, again.pid)

      yield* driver.destroy(id)
      yield* driver.destroy(id)
      assert.isFalse(processExists(again.pid!))
      assert.isFalse(interfaceExists(veth))
      for (const dir of cgroupDirs(hostId, id)) assert.isFalse(FsSync.existsSync(dir), dir)
      assert.isFalse(FsSync.existsSync(NodePath.join(dataDir, "sandboxes", id)))
      // The address is free again (another test may have leased it since: then it is not ours).
      const leaseFile = NodePath.join("/run/svc-sandboxes/svcbr0/leases", info.internalIp)
      const holder = FsSync.existsSync(leaseFile) ? FsSync.readFileSync(leaseFile, "utf8") : ""
      assert.notInclude(holder, `"sandboxId":"${id}"`)
      assert.deepStrictEqual(yield* driver.list, [])
      assert.strictEqual((yield* Effect.flip(driver.start(id)))._tag, "SandboxNotFound")
      assert.strictEqual((yield* Effect.flip(driver.exec(id, exec(["true"]))))._tag, "SandboxNotFound")
    }))

  it.effect("refuses bad input with typed errors", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("refuse")
      yield* withSandbox(driver, spec(id))
      const tag = <A, E extends { _tag: string }>(effect: Effect.Effect<A, E>) =>
        Effect.flip(effect).pipe(Effect.map((e) => e._tag))

      assert.strictEqual(yield* tag(driver.create(spec(id))), "SandboxAlreadyExists")
      assert.strictEqual(
        yield* tag(driver.create({ ...spec(uniqueId("ok")), sandboxId: "../escape" } as never)),
        "InvalidSandboxRequest"
      )
      assert.strictEqual(
        yield* tag(driver.create(spec(uniqueId("tpl"), { template: "no-such-template" }))),
        "TemplateNotFound"
      )
      assert.strictEqual(
        yield* tag(driver.create({ ...spec(uniqueId("bad")), ramMb: -1 } as never)),
        "InvalidSandboxRequest"
      )
      assert.strictEqual(
        yield* tag(driver.create({ ...spec(uniqueId("bad")), env: { "A=B": "x" } } as never)),
        "InvalidSandboxRequest"
      )
      assert.strictEqual(yield* tag(driver.exec(id, { cmd: [] } as never)), "InvalidSandboxRequest")
      assert.strictEqual(yield* tag(driver.exec(id, { cmd: ["echo", "a\0b"] } as never)), "InvalidSandboxRequest")
      assert.strictEqual(yield* tag(driver.exec(id, { cmd: ["true"], cwd: "tmp" } as never)), "InvalidSandboxRequest")
      assert.strictEqual(yield* tag(driver.exec(id, { cmd: ["true"], timeoutMs: 0 } as never)), "InvalidSandboxRequest")
      assert.strictEqual(yield* tag(driver.exec("nope-" + id, exec(["true"]))), "SandboxNotFound")
      assert.strictEqual(yield* tag(driver.exec("../../x", exec(["true"]))), "InvalidSandboxRequest")
      assert.strictEqual(yield* tag(driver.destroy("a/b")), "InvalidSandboxRequest")
      for (const path of ["", "relative/file", "../../etc/shadow", "/etc/\0passwd"]) {
        assert.strictEqual(yield* tag(driver.readFile(id, path)), "InvalidSandboxRequest", JSON.stringify(path))
        assert.strictEqual(yield* tag(driver.writeFile(id, path, new Uint8Array(1))), "InvalidSandboxRequest")
        assert.strictEqual(yield* tag(driver.listDir(id, path)), "InvalidSandboxRequest")
      }
      assert.strictEqual(
        yield* tag(driver.writeFile(id, "/tmp/x", new Uint8Array(1), 0o17777)),
        "InvalidSandboxRequest"
      )
      for (const size of [{ cols: 0, rows: 24 }, { cols: 80, rows: 100_000 }, { cols: "80", rows: 24 }]) {
        assert.strictEqual(
          yield* tag(driver.pty(id, size as never).pipe(Effect.scoped)),
          "InvalidSandboxRequest",
          JSON.stringify(size)
        )
      }
      // The sandbox still works after all that.
      assert.strictEqual((yield* driver.exec(id, exec(["true"]))).exitCode, 0)
    }))

  it.effect("isolates processes, files, capabilities and limits", () =>
    Effect.gen(function*() {
      const { driver, hostId } = yield* TestDriver
      const a = uniqueId("iso-a")
      const b = uniqueId("iso-b")
      const infoA = yield* withSandbox(driver, spec(a, { ramMb: 200, cpu: 2 }))
      yield* withSandbox(driver, spec(b))

      yield* driver.exec(a, sh("echo only-a > /root/mine; sleep 1000 > /dev/null 2>&1 &"))
      const procs = text(
        (yield* driver.exec(b, sh("ls /proc | grep '^[0-9]' | tr '\\n' ' '; echo; ps -o args"))).stdout
      )
      assert.notInclude(procs, "sleep 1000")
      const pids = procs.split("\n")[0]!.trim().split(" ").map(Number)
      assert.isTrue(pids.every((pid) => pid < 20), procs)
      assert.notInclude(procs, "node")
      // Host paths do not show in the sandbox's process list.
      assert.notInclude(procs, "/tmp/svc-driver-test")
      assert.strictEqual(text((yield* driver.exec(a, exec(["hostname"]))).stdout), `${a}\n`)

      const fromB = yield* Effect.flip(driver.readFile(b, "/root/mine"))
      assert.strictEqual(fromB._tag, "SandboxFileError")
      assert.strictEqual((fromB as { reason?: string }).reason, "not_found")
      assert.strictEqual((yield* driver.exec(b, exec(["cat", "/root/mine"]))).exitCode, 1)

      // Root inside has no power over its network or mounts.
      const netAdmin = yield* driver.exec(
        a,
        sh("ip addr add 10.213.255.250/16 dev eth0 || ip route add default via 10.213.0.1")
      )
      assert.notStrictEqual(netAdmin.exitCode, 0)
      assert.notStrictEqual((yield* driver.exec(a, exec(["mount", "-t", "tmpfs", "t", "/mnt"]))).exitCode, 0)
      // Nor replace the helper the agent runs inside on every exec.
      const swap = yield* driver.exec(
        a,
        sh("mv /dev/.svc /dev/.old || rm -f /dev/.svc/busybox || echo x > /dev/.svc/busybox")
      )
      assert.notStrictEqual(swap.exitCode, 0)
      assert.strictEqual((yield* driver.exec(a, exec(["true"]))).exitCode, 0)
      // Nor can it signal the sandbox's init.
      yield* driver.exec(a, exec(["kill", "-9", "1"]))
      assert.strictEqual((yield* driver.exec(a, exec(["true"]))).exitCode, 0)

      const [memoryDir, cpuDir, , pidsDir] = cgroupDirs(hostId, a)
      assert.strictEqual(
        FsSync.readFileSync(NodePath.join(memoryDir!, "memory.limit_in_bytes"), "utf8").trim(),
        String(200 * 1024 * 1024)
      )
      assert.strictEqual(FsSync.readFileSync(NodePath.join(cpuDir!, "cpu.cfs_quota_us"), "utf8").trim(), "200000")
      assert.strictEqual(FsSync.readFileSync(NodePath.join(pidsDir!, "pids.max"), "utf8").trim(), "1024")
      const stats = yield* driver.stats(a)
      assert.isAtLeast(stats.pids, 3)
      assert.isAbove(stats.memoryBytes, 0)
      assert.isAbove(stats.cpuUsageNs ?? 0, 0)
      assert.strictEqual(infoA.limits.cpu, "applied")

      // The memory limit bites: a process allocating past it is killed.
      const hog = yield* driver.exec(
        a,
        exec(["dd", "if=/dev/zero", "of=/dev/null", "bs=300M", "count=1"], { timeoutMs: 30_000 })
      )
      assert.strictEqual(hog.exitCode, 137)
      const oom = FsSync.readFileSync(NodePath.join(memoryDir!, "memory.oom_control"), "utf8")
      assert.isAbove(Number(/oom_kill (\d+)/.exec(oom)?.[1] ?? 0), 0, oom)
      assert.strictEqual((yield* driver.exec(a, exec(["true"]))).exitCode, 0)
    }))
})

describe("DriverConfig", () => {
  it("rejects a bad configuration", () => {
    const given = { dataDir: "/var/lib/svc/h1", hostId: "h1" }
    assert.throws(() => DriverConfig.make({ ...given, dataDir: "relative/dir" }))
    assert.throws(() => DriverConfig.make({ ...given, bridge: "a-name-longer-than-15" }))
    assert.throws(() => DriverConfig.make({ ...given, subnet: "10.0.0.0/8" }))
    assert.throws(() => DriverConfig.make({ ...given, hostId: "../up" }))
    assert.strictEqual(DriverConfig.make(given).leaseDir, "/run/svc-sandboxes/svcbr0/leases")
  })
})
