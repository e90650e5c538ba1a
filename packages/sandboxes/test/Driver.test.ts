import { assert, describe, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as Http from "node:http"
import * as Net from "node:net"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { ExecRequest } from "../src/Driver.ts"
import { DriverConfig } from "../src/Driver/Config.ts"
import { intToIp, lease, parseSubnet, release, vethNames } from "../src/Driver/Network.ts"
import {
  cgroupDirs,
  interfaceExists,
  processExists,
  spec,
  TestDriver,
  text,
  uniqueId,
  withSandbox
} from "./fixtures/support.ts"

const exec = (cmd: ReadonlyArray<string>, options: Omit<ConstructorParameters<typeof ExecRequest>[0], "cmd"> = {}) =>
  new ExecRequest({ cmd, ...options })

const sh = (script: string, options: Omit<ConstructorParameters<typeof ExecRequest>[0], "cmd"> = {}) =>
  exec(["sh", "-c", script], options)

/** A TCP server on the host that records whether anyone connected. */
const hostServer = (host: string) =>
  Effect.acquireRelease(
    Effect.callback<{ port: number; connections: () => number; close: () => void }>((resume) => {
      let connections = 0
      const server = Net.createServer((socket) => {
        connections++
        socket.end("host-secret\n")
      })
      server.listen(0, host, () => {
        const address = server.address() as Net.AddressInfo
        resume(Effect.succeed({ port: address.port, connections: () => connections, close: () => server.close() }))
      })
    }),
    (server) => Effect.sync(() => server.close())
  )

const httpGet = (url: string) =>
  Effect.callback<{ status: number; body: string }, Error>((resume) => {
    const request = Http.get(url, { timeout: 5000 }, (response) => {
      let body = ""
      response.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")))
      response.on("end", () => resume(Effect.succeed({ status: response.statusCode ?? 0, body })))
    })
    request.on("error", (e) => resume(Effect.fail(e)))
    request.on("timeout", () => request.destroy(new Error("timeout")))
  })

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
      assert.strictEqual(yield* tag(driver.create({ ...spec(uniqueId("ok")), sandboxId: "../escape" } as never)), "InvalidSandboxRequest")
      assert.strictEqual(yield* tag(driver.create(spec(uniqueId("tpl"), { template: "no-such-template" }))), "TemplateNotFound")
      assert.strictEqual(yield* tag(driver.create({ ...spec(uniqueId("bad")), ramMb: -1 } as never)), "InvalidSandboxRequest")
      assert.strictEqual(yield* tag(driver.create({ ...spec(uniqueId("bad")), env: { "A=B": "x" } } as never)), "InvalidSandboxRequest")
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
      assert.strictEqual(yield* tag(driver.writeFile(id, "/tmp/x", new Uint8Array(1), 0o17777)), "InvalidSandboxRequest")
      assert.strictEqual(yield* tag(driver.pty(id, { cols: 80, rows: 24 } as never).pipe(Effect.scoped)), "DriverUnsupported")
      // The sandbox still works after all that.
      assert.strictEqual((yield* driver.exec(id, exec(["true"]))).exitCode, 0)
    }))

  it.effect("exec: cwd, env, stdin, exit codes, timeout, output cap", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("exec")
      yield* withSandbox(driver, spec(id, { env: { FROM_SPEC: "spec", SHARED: "spec" } }))

      const cwd = yield* driver.exec(id, exec(["pwd"], { cwd: "/tmp" }))
      assert.strictEqual(text(cwd.stdout), "/tmp\n")
      const missingCwd = yield* driver.exec(id, exec(["pwd"], { cwd: "/no/such/dir" }))
      assert.strictEqual(missingCwd.exitCode, 126)

      const env = yield* driver.exec(id, sh("echo $FROM_SPEC $SHARED $FROM_EXEC; env | sort", {
        env: { SHARED: "exec", FROM_EXEC: "x y" }
      }))
      const [first, ...rest] = text(env.stdout).split("\n")
      assert.strictEqual(first, "spec exec x y")
      // The agent's environment does not leak in.
      assert.isFalse(rest.some((line) => line.startsWith("NODE") || line.startsWith("VITEST")), rest.join(","))

      const stdin = yield* driver.exec(id, exec(["wc", "-c"], { stdin: new Uint8Array(70_000).fill(65) }))
      assert.strictEqual(text(stdin.stdout).trim(), "70000")
      const stdinText = yield* driver.exec(id, exec(["cat"], { stdin: "from stdin" }))
      assert.strictEqual(text(stdinText.stdout), "from stdin")

      const failing = yield* driver.exec(id, sh("echo oops >&2; exit 7"))
      assert.strictEqual(failing.exitCode, 7)
      assert.strictEqual(text(failing.stderr), "oops\n")
      assert.strictEqual((yield* driver.exec(id, exec(["no-such-command"]))).exitCode, 127)
      // An argv starting with "-" is a command name, never an option of the helper shell.
      assert.strictEqual((yield* driver.exec(id, exec(["-x"]))).exitCode, 127)
      const multiline = yield* driver.exec(id, sh("printf '%s|' \"$V\"", { env: { V: "a\nb=c" } }))
      assert.strictEqual(text(multiline.stdout), "a\nb=c|")
      assert.strictEqual((yield* driver.exec(id, sh("kill -9 $$"))).exitCode, 137)

      const slow = yield* driver.exec(id, sh("sleep 30 & sleep 31; echo never", { timeoutMs: 200 }))
      assert.isTrue(slow.timedOut)
      assert.strictEqual(text(slow.stdout), "")
      const ps = yield* driver.exec(id, exec(["ps", "-o", "args"]))
      assert.notInclude(text(ps.stdout), "sleep 3", text(ps.stdout))

      const capped = yield* driver.exec(id, sh("head -c 5000 /dev/zero; echo small >&2", { maxOutputBytes: 1000 }))
      assert.strictEqual(capped.exitCode, 0)
      assert.strictEqual(capped.stdout.length, 1000)
      assert.isTrue(capped.stdoutTruncated)
      assert.isFalse(capped.stderrTruncated)
      assert.strictEqual(text(capped.stderr), "small\n")

      // A background process keeping the pipes open does not hold the exec.
      const background = yield* driver.exec(id, sh("sleep 20 & echo started", { timeoutMs: 10_000 }))
      assert.strictEqual(text(background.stdout), "started\n")
      assert.isFalse(background.timedOut)
    }))

  it.effect("isolates processes, files, capabilities and limits", () =>
    Effect.gen(function*() {
      const { driver, hostId } = yield* TestDriver
      const a = uniqueId("iso-a")
      const b = uniqueId("iso-b")
      const infoA = yield* withSandbox(driver, spec(a, { ramMb: 200, cpu: 2 }))
      yield* withSandbox(driver, spec(b))

      yield* driver.exec(a, sh("echo only-a > /root/mine; sleep 1000 > /dev/null 2>&1 &"))
      const procs = text((yield* driver.exec(b, sh("ls /proc | grep '^[0-9]' | tr '\\n' ' '; echo; ps -o args"))).stdout)
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
      const netAdmin = yield* driver.exec(a, sh("ip addr add 10.213.255.250/16 dev eth0 || ip route add default via 10.213.0.1"))
      assert.notStrictEqual(netAdmin.exitCode, 0)
      assert.notStrictEqual((yield* driver.exec(a, exec(["mount", "-t", "tmpfs", "t", "/mnt"]))).exitCode, 0)
      // Nor replace the helper the agent runs inside on every exec.
      const swap = yield* driver.exec(a, sh("mv /dev/.svc /dev/.old || rm -f /dev/.svc/busybox || echo x > /dev/.svc/busybox"))
      assert.notStrictEqual(swap.exitCode, 0)
      assert.strictEqual((yield* driver.exec(a, exec(["true"]))).exitCode, 0)
      // Nor can it signal the sandbox's init.
      yield* driver.exec(a, exec(["kill", "-9", "1"]))
      assert.strictEqual((yield* driver.exec(a, exec(["true"]))).exitCode, 0)

      const [memoryDir, cpuDir, , pidsDir] = cgroupDirs(hostId, a)
      assert.strictEqual(FsSync.readFileSync(NodePath.join(memoryDir!, "memory.limit_in_bytes"), "utf8").trim(), String(200 * 1024 * 1024))
      assert.strictEqual(FsSync.readFileSync(NodePath.join(cpuDir!, "cpu.cfs_quota_us"), "utf8").trim(), "200000")
      assert.strictEqual(FsSync.readFileSync(NodePath.join(pidsDir!, "pids.max"), "utf8").trim(), "1024")
      const stats = yield* driver.stats(a)
      assert.isAtLeast(stats.pids, 3)
      assert.isAbove(stats.memoryBytes, 0)
      assert.isAbove(stats.cpuUsageNs ?? 0, 0)
      assert.strictEqual(infoA.limits.cpu, "applied")

      // The memory limit bites: a process allocating past it is killed.
      const hog = yield* driver.exec(a, exec(["dd", "if=/dev/zero", "of=/dev/null", "bs=300M", "count=1"], { timeoutMs: 30_000 }))
      assert.strictEqual(hog.exitCode, 137)
      const oom = FsSync.readFileSync(NodePath.join(memoryDir!, "memory.oom_control"), "utf8")
      assert.isAbove(Number(/oom_kill (\d+)/.exec(oom)?.[1] ?? 0), 0, oom)
      assert.strictEqual((yield* driver.exec(a, exec(["true"]))).exitCode, 0)
    }))

  it.effect("file API never reaches the host's files", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("files")
      yield* withSandbox(driver, spec(id))
      const sandboxPasswd = text(yield* driver.readFile(id, "/etc/passwd"))
      const hostPasswd = FsSync.readFileSync("/etc/passwd", "utf8")
      const hostShadow = FsSync.readFileSync("/etc/shadow", "utf8")
      assert.notStrictEqual(sandboxPasswd, hostPasswd)
      assert.include(sandboxPasswd, "root:x:0:0")

      yield* driver.exec(id, sh(
        "ln -s /etc/passwd /root/abs-link; ln -s ../../../../../../../etc/shadow /root/rel-link; ln -s ../../.. /root/up; ln -s /proc/1/root /root/init-root"
      ))
      const attempts = [
        "/../../../../etc/passwd",
        "/etc/../../../etc/shadow",
        "/root/abs-link",
        "/root/rel-link",
        "/root/up/etc/passwd",
        "/root/init-root/etc/passwd",
        "/proc/1/root/etc/passwd",
        "/proc/self/root/etc/shadow"
      ]
      for (const path of attempts) {
        const result = yield* driver.readFile(id, path).pipe(Effect.map(text), Effect.orElseSucceed(() => ""))
        assert.notStrictEqual(result, hostPasswd, path)
        assert.notStrictEqual(result, hostShadow, path)
        if (result !== "") assert.isTrue(result === sandboxPasswd || result.startsWith("root:*:"), `${path}: ${result}`)
      }
      // Writing through a link lands inside the sandbox, never on the host.
      yield* driver.writeFile(id, "/root/up/etc/svc-written-through-link", new TextEncoder().encode("x"))
      assert.isFalse(FsSync.existsSync("/etc/svc-written-through-link"))
      assert.strictEqual(text(yield* driver.readFile(id, "/etc/svc-written-through-link")), "x")

      const reason = <A>(effect: Effect.Effect<A, { _tag: string }>) =>
        Effect.flip(effect).pipe(Effect.map((e) => (e as { reason?: string }).reason ?? e._tag))
      assert.strictEqual(yield* reason(driver.readFile(id, "/nope")), "not_found")
      assert.strictEqual(yield* reason(driver.readFile(id, "/etc")), "is_directory")
      assert.strictEqual(yield* reason(driver.readFile(id, "/dev/zero")), "not_regular_file")
      assert.strictEqual(yield* reason(driver.listDir(id, "/etc/passwd")), "not_directory")
      assert.strictEqual(yield* reason(driver.listDir(id, "/nope")), "not_found")
      assert.strictEqual(yield* reason(driver.stat(id, "/nope")), "not_found")
      assert.strictEqual(yield* reason(driver.writeFile(id, "/etc", new Uint8Array(1))), "is_directory")
      assert.strictEqual(yield* reason(driver.writeFile(id, "/etc/passwd/child", new Uint8Array(1))), "not_directory")
      assert.strictEqual(yield* reason(driver.readFile(id, "/etc/passwd", { maxBytes: 10 })), "too_large")

      // Odd names survive the listing; links are reported as links.
      yield* driver.writeFile(id, "/srv/odd/with space", new Uint8Array(0))
      yield* driver.writeFile(id, "/srv/odd/new\nline", new Uint8Array(3), 0o755)
      yield* driver.writeFile(id, "/srv/odd/.hidden", new Uint8Array(1))
      const odd = yield* driver.listDir(id, "/srv/odd")
      assert.deepStrictEqual(odd.map((e) => [e.name, e.type, e.size]), [[".hidden", "file", 1], ["new\nline", "file", 3], ["with space", "file", 0]])
      assert.strictEqual(text((yield* driver.exec(id, exec(["stat", "-c", "%a", "/srv/odd/new\nline"]))).stdout), "755\n")
      assert.strictEqual((yield* driver.stat(id, "/root/abs-link")).type, "symlink")
      const root = yield* driver.listDir(id, "/root")
      assert.includeMembers(root.map((e) => e.name), ["abs-link", "up"])

      // Binary content of a few MiB round-trips byte for byte.
      const big = new Uint8Array(3 * 1024 * 1024 + 7)
      for (let i = 0; i < big.length; i++) big[i] = (i * 31 + 7) & 255
      yield* driver.writeFile(id, "/tmp/big.bin", big)
      const back = yield* driver.readFile(id, "/tmp/big.bin")
      assert.strictEqual(back.length, big.length)
      assert.isTrue(Buffer.from(back).equals(Buffer.from(big)))
    }))

  it.effect("network: host loopback and host addresses unreachable, exposed port reachable", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("net")
      const info = yield* withSandbox(driver, spec(id, { exposedPorts: [8080] }))

      const loopback = yield* hostServer("127.0.0.1")
      const fromInside = yield* driver.exec(id, sh(`echo hi | nc -w 2 127.0.0.1 ${loopback.port}`, { timeoutMs: 10_000 }))
      assert.notInclude(text(fromInside.stdout), "host-secret")
      assert.strictEqual(loopback.connections(), 0)

      // A host address that is not the bridge's: no route leads there from inside.
      const external = Object.values(Os.networkInterfaces()).flat()
        .find((a) => a !== undefined && a.family === "IPv4" && !a.internal && !a.address.startsWith("10.213."))
      if (external !== undefined) {
        const wide = yield* hostServer("0.0.0.0")
        const toHost = yield* driver.exec(id, sh(`echo hi | nc -w 2 ${external.address} ${wide.port}`, { timeoutMs: 10_000 }))
        assert.notInclude(text(toHost.stdout), "host-secret")
        assert.strictEqual(wide.connections(), 0)
      }

      yield* driver.writeFile(id, "/www/hello.txt", new TextEncoder().encode("served from inside\n"))
      const served = yield* driver.exec(id, exec(["httpd", "-p", "8080", "-h", "/www"]))
      assert.strictEqual(served.exitCode, 0, text(served.stderr))
      // httpd binds before it daemonizes: the port is open once exec returns.
      const response = yield* httpGet(`http://${info.internalIp}:8080/hello.txt`)
      assert.strictEqual(response.status, 200)
      assert.strictEqual(response.body, "served from inside\n")
    }))
})

describe("SandboxDriver network leases and config", () => {
  it("derives veth names and the subnet's addresses", () => {
    assert.deepStrictEqual(vethNames("10.213.1.2"), { host: "sv0ad50102" })
    const subnet = parseSubnet("10.213.7.9/16")
    assert.strictEqual(subnet.gateway, "10.213.0.1")
    assert.strictEqual(intToIp(subnet.first), "10.213.0.2")
    assert.strictEqual(intToIp(subnet.last), "10.213.255.254")
  })

  it("rejects a bad configuration", () => {
    assert.throws(() => DriverConfig.make({ dataDir: "relative/dir" }))
    assert.throws(() => DriverConfig.make({ bridge: "a-name-longer-than-15" }))
    assert.throws(() => DriverConfig.make({ subnet: "10.0.0.0/8" }))
    assert.throws(() => DriverConfig.make({ hostId: "../up" }))
    assert.strictEqual(DriverConfig.make({ hostId: "h1" }).leaseDir, "/run/svc-sandboxes/svcbr0/leases")
  })

  it.live("hands out distinct addresses to concurrent claimants and takes over stale leases", () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.promise(() => Fs.mkdtemp(NodePath.join(Os.tmpdir(), "svc-lease-test-"))),
        (d) => Effect.promise(() => Fs.rm(d, { recursive: true, force: true }))
      )
      const leaseDir = NodePath.join(dir, "leases")
      const subnet = parseSubnet("10.99.0.0/28") // 13 usable addresses
      const owners = Array.from({ length: 13 }, (_, i) => ({ dataDir: dir, sandboxId: `s${i}` }))
      for (const owner of owners) yield* Effect.promise(() => Fs.mkdir(NodePath.join(dir, "sandboxes", owner.sandboxId), { recursive: true }))
      const ips = yield* Effect.promise(() => Promise.all(owners.map((owner) => lease(leaseDir, subnet, owner))))
      assert.strictEqual(new Set(ips).size, 13)
      assert.isFalse(ips.includes(undefined))
      // Full: one more claimant gets nothing, and an owner asking again keeps its own.
      assert.isUndefined(yield* Effect.promise(() => lease(leaseDir, subnet, { dataDir: dir, sandboxId: "late" })))
      assert.strictEqual(yield* Effect.promise(() => lease(leaseDir, subnet, owners[3]!, ips[3])), ips[3])
      // s5's folder disappears (its agent was removed): its address becomes free for "late".
      yield* Effect.promise(() => Fs.rm(NodePath.join(dir, "sandboxes", "s5"), { recursive: true }))
      assert.strictEqual(yield* Effect.promise(() => lease(leaseDir, subnet, { dataDir: dir, sandboxId: "late" })), ips[5])
      // Release only frees a lease its owner holds.
      yield* Effect.promise(() => release(leaseDir, ips[5]!, owners[5]!))
      assert.isTrue(FsSync.existsSync(NodePath.join(leaseDir, ips[5]!)))
      yield* Effect.promise(() => release(leaseDir, ips[5]!, { dataDir: dir, sandboxId: "late" }))
      assert.isFalse(FsSync.existsSync(NodePath.join(leaseDir, ips[5]!)))
    }))
})
