/**
 * The spawner (`src/Driver/Spawner.ts`, `native/svc-spawner.c`): every host command of the driver
 * is started by it, never by a fork of the agent; bytes, exit codes and signals pass as before;
 * its death fails the commands in flight (no hang) and the next command starts a new one;
 * nothing but the agent can ask it for anything; and what it does itself in a sandbox's
 * namespaces (its veth, an adopted sandbox's hostname) is for that sandbox's init only.
 */
import { assert, layer } from "@effect/vitest"
import { descriptorOf, stopReading } from "@svc/host-protocol/Handoff"
import { eventually } from "@svc/testing/Eventually"
import { Effect, Exit, Fiber, Stream } from "effect"
import { spawnSync } from "node:child_process"
import { createHash, randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Net from "node:net"
import * as Spawner from "../src/Driver/Spawner.ts"
import { exec, processExists, sh, spec, TestDriver, text, uniqueId, withSandbox } from "./fixtures/support.ts"

const ppidOf = (pid: number): number | undefined => {
  try {
    const stat = FsSync.readFileSync(`/proc/${pid}/stat`, "utf8")
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
  } catch {
    return undefined
  }
}

/** Host processes whose command line includes `needle`. */
/** Processes whose command line (arguments joined by spaces) includes `needle`. */
const hostProcesses = (needle: string) =>
  FsSync.readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number).filter((pid) => {
    try {
      return FsSync.readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").includes(needle)
    } catch {
      return false
    }
  })

/** Who holds the pipe `pipe:[inode]`: [pid, fd] of every process with a descriptor of it. */
const holdersOf = (link: string) => {
  const found: Array<[number, number]> = []
  for (const name of FsSync.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue
    let fds: Array<string> = []
    try {
      fds = FsSync.readdirSync(`/proc/${name}/fd`)
    } catch {
      continue
    }
    for (const fd of fds) {
      try {
        if (FsSync.readlinkSync(`/proc/${name}/fd/${fd}`) === link) found.push([Number(name), Number(fd)])
      } catch {
        // Closed meanwhile.
      }
    }
  }
  return found
}

/** Field 22 of /proc/<pid>/stat: the start time the driver names a sandbox's init by. */
const startTicksOf = (pid: number): number => {
  const stat = FsSync.readFileSync(`/proc/${pid}/stat`, "utf8")
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19])
}

/** Both ends of a loopback TCP connection. */
const connectedPair = () =>
  new Promise<{ readonly server: Net.Socket; readonly client: Net.Socket }>((resolve, reject) => {
    const listener = Net.createServer()
    listener.once("error", reject)
    listener.listen(0, "127.0.0.1", () => {
      const { port } = listener.address() as Net.AddressInfo
      listener.once("connection", (server) => {
        listener.close()
        server.on("error", () => undefined)
        resolve({ server, client })
      })
      const client = Net.connect(port, "127.0.0.1")
      client.on("error", () => undefined)
    })
  })

const runningSpawner = () => {
  const { pid } = Spawner.status()
  assert.isDefined(pid, "a spawner runs once the driver has started")
  return pid!
}

layer(TestDriver.layer(), { excludeTestServices: true, timeout: 180_000 })(
  "SandboxDriver spawner (bubblewrap)",
  (it) => {
    it.effect("commands start from the spawner, not the agent; bytes, backpressure and exit codes pass through", () =>
      Effect.gen(function*() {
        const { driver } = yield* TestDriver
        const id = uniqueId("spawn")
        const info = yield* withSandbox(driver, spec(id))
        const spawner = runningSpawner()

        // The sandbox's host-side bubblewrap (svc-start exec'd into it) is the spawner's child.
        const monitor = ppidOf(info.pid!)
        assert.isDefined(monitor)
        assert.strictEqual(ppidOf(monitor!), spawner)

        // A background process: its host-side svc-enter is the spawner's child, not the agent's.
        const cat = yield* driver.startProcess(id, { cmd: ["sh", "-c", "echo up; cat; exit 5"], stdin: true })
        const enters = hostProcesses("--report-fd").filter((pid) => ppidOf(pid) === spawner)
        assert.isAtLeast(enters.length, 1, "svc-enter of the background process runs under the spawner")
        const agentChildren = FsSync.readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number).filter((
          pid
        ) => ppidOf(pid) === process.pid)
        assert.deepStrictEqual(agentChildren, [spawner], "the agent's only child is the spawner")

        // stdin streamed in (8 MiB, far past every pipe's buffer: backpressure), stdout streamed out.
        const follower = yield* driver.processOutput(id, cat.pid, true).pipe(
          Effect.flatMap((s) =>
            Stream.runFold(s, () => ({ bytes: 0, exit: -1 }), (acc, event) =>
              event._tag === "Output"
                ? { ...acc, bytes: acc.bytes + (event.stream === "stdout" ? event.bytes.length : 0) }
                : event._tag === "Exit"
                ? { ...acc, exit: event.exitCode ?? -1 }
                : acc)
          ),
          Effect.forkScoped
        )
        const chunk = new Uint8Array(64 * 1024).fill(120)
        yield* driver.processStdin(id, cat.pid, Stream.range(1, 128).pipe(Stream.map(() => chunk)), true)
        const followed = yield* Fiber.join(follower)
        assert.deepStrictEqual(followed, { bytes: 3 + 128 * 64 * 1024, exit: 5 })

        // Buffered exec: stdin past the inline size (a pipe the agent writes), output, exit codes, a signal.
        const big = yield* driver.exec(id, exec(["wc", "-c"], { stdin: new Uint8Array(3 * 1024 * 1024).fill(65) }))
        assert.strictEqual(text(big.stdout).trim(), String(3 * 1024 * 1024))
        assert.strictEqual((yield* driver.exec(id, sh("exit 42"))).exitCode, 42)
        assert.strictEqual((yield* driver.exec(id, sh("kill -9 $$"))).exitCode, 137)
        const timed = yield* driver.exec(id, sh("sleep 30", { timeoutMs: 300 }))
        assert.isTrue(timed.timedOut)

        // A streamed exec: output, then its exit code.
        const events = yield* Stream.runCollect(yield* driver.execStream(id, sh("echo one; echo two >&2; exit 3")))
        const out = events.filter((e) => e._tag === "Output").map((e) => (e._tag === "Output" ? text(e.bytes) : ""))
        assert.sameMembers(out, ["one\n", "two\n"])
        assert.deepInclude(events.at(-1), { _tag: "Exit", exitCode: 3 })
        assert.strictEqual(Spawner.status().pid, spawner, "the same spawner served every command")
      }).pipe(Effect.scoped))

    it.effect("killed -9: commands in flight fail at once with a clear error, the sandbox lives, a new spawner serves", () =>
      Effect.gen(function*() {
        const { driver } = yield* TestDriver
        const id = uniqueId("respawn")
        const info = yield* withSandbox(driver, spec(id))
        const before = Spawner.status()
        const spawner = runningSpawner()

        const marker = `sleep ${1000 + Math.floor(Math.random() * 1000)}`
        const running = yield* driver.exec(id, sh(`${marker}; echo never`, { timeoutMs: 600_000 })).pipe(
          Effect.forkScoped
        )
        const background = yield* driver.startProcess(id, { cmd: ["sh", "-c", `${marker}`], stdin: false })
        // Both have started inside (their own `sh -c`, not only the svc-enter that names them).
        const inside = () =>
          hostProcesses(marker).filter((pid) => {
            try {
              return !FsSync.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("svc-enter")
            } catch {
              return false
            }
          })
        // The exec's shell and its sleep, and the background command's sleep (its shell execs it).
        yield* eventually(Effect.sync(() => inside().length), (running) => running >= 3)

        process.kill(spawner, "SIGKILL")

        const failed = yield* Fiber.await(running)
        assert.isTrue(Exit.isFailure(failed), "the exec in flight fails")
        if (Exit.isFailure(failed)) {
          const error = String(JSON.stringify(failed.cause))
          assert.include(error, "spawner", error)
        }
        // The background process ends too, and says so.
        yield* eventually(Effect.map(driver.process(id, background.pid), (p) => p.state), (state) => state === "exited")
        // Nothing of them is left inside.
        yield* eventually(Effect.sync(() => hostProcesses(marker).length), (left) => left === 0)

        // The sandbox outlived the spawner; the next command starts a new spawner.
        assert.isTrue(processExists(info.pid!))
        const again = yield* driver.exec(id, sh("echo again"))
        assert.strictEqual(text(again.stdout), "again\n")
        const after = Spawner.status()
        assert.notStrictEqual(after.pid, spawner)
        assert.strictEqual(after.starts, before.starts + 1)
        // And creating another sandbox works through it.
        const other = uniqueId("respawn2")
        yield* withSandbox(driver, spec(other))
        assert.strictEqual(text((yield* driver.exec(other, sh("echo ok"))).stdout), "ok\n")
      }).pipe(Effect.scoped))

    it.effect("its veth and adopt requests act on the sandbox's init only: another start time is refused, nothing changes", () =>
      Effect.gen(function*() {
        const { driver, config } = yield* TestDriver
        const id = uniqueId("init")
        const info = yield* withSandbox(driver, spec(id))
        const pid = info.pid!
        // The pid of a process that ended and a new one that took its number: the start time differs.
        const stale = startTicksOf(pid) + 1
        const outcome = (promise: Promise<void>) =>
          Effect.promise(() => promise.then(() => "done", (e: Error) => e.message))

        const adopted = yield* outcome(
          Spawner.adoptInside({ pid, startTicks: stale, hostname: "intruder", shmBytes: 1024 * 1024 })
        )
        assert.include(adopted, "No such process")
        const hostEnd = `svt${uniqueId("").slice(-8)}`.slice(0, 15)
        const attached = yield* outcome(Spawner.veth({
          pid,
          startTicks: stale,
          bridge: config.bridge,
          hostEnd,
          mac: "02:53:0a:d5:ff:fe",
          ip: "10.213.255.254",
          prefix: 16,
          gateway: undefined
        }))
        assert.include(attached, "No such process")
        assert.isFalse(FsSync.existsSync(`/sys/class/net/${hostEnd}`))
        assert.strictEqual(text((yield* driver.exec(id, sh("hostname"))).stdout), `${id}\n`)

        // The right start time: the same request is done (hostname and /dev/shm, as adopt sets them).
        const done = yield* outcome(
          Spawner.adoptInside({ pid, startTicks: startTicksOf(pid), hostname: "renamed", shmBytes: 3 * 1024 * 1024 })
        )
        assert.strictEqual(done, "done")
        const after = yield* driver.exec(id, sh("hostname; grep ' /dev/shm ' /proc/self/mountinfo"))
        assert.match(text(after.stdout), /^renamed\n.* \/dev\/shm rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=3072k/)
      }).pipe(Effect.scoped))

    it.effect("its unlink request removes a host interface by name (a veth's end): one gone already is done", () =>
      Effect.gen(function*() {
        const { driver } = yield* TestDriver
        // The spawner runs once the driver has started something.
        yield* withSandbox(driver, spec(uniqueId("unlink")))
        const outcome = (promise: Promise<void>) =>
          Effect.promise(() => promise.then(() => "done", (e: Error) => e.message))
        const name = `svu${uniqueId("").slice(-8)}`.slice(0, 15)
        const peer = `${name.slice(0, 14)}p`
        const made = spawnSync("ip", ["link", "add", name, "type", "veth", "peer", "name", peer], { encoding: "utf8" })
        assert.strictEqual(made.status, 0, made.stderr)
        assert.isTrue(FsSync.existsSync(`/sys/class/net/${name}`))
        assert.strictEqual(yield* outcome(Spawner.unlink(name)), "done")
        // The pair with it.
        assert.isFalse(FsSync.existsSync(`/sys/class/net/${name}`))
        assert.isFalse(FsSync.existsSync(`/sys/class/net/${peer}`))
        assert.strictEqual(yield* outcome(Spawner.unlink(name)), "done")
        assert.include(yield* outcome(Spawner.unlink("x".repeat(16))), "an interface name of 1 to 15 bytes")
      }).pipe(Effect.scoped))

    it.effect("no other process can reach it: its requests come on a socketpair only the agent holds", () =>
      Effect.gen(function*() {
        const { driver, config } = yield* TestDriver
        const id = uniqueId("reach")
        yield* withSandbox(driver, spec(id))
        const spawner = runningSpawner()

        // Its descriptors: pipes, /dev/null, a signalfd and unnamed sockets (the socketpairs it
        // was started with): nothing with a name to connect to, nothing listening.
        const links = FsSync.readdirSync(`/proc/${spawner}/fd`).map((fd) =>
          FsSync.readlinkSync(`/proc/${spawner}/fd/${fd}`)
        )
        const sockets = links.flatMap((link) => /^socket:\[(\d+)\]$/.exec(link)?.[1] ?? [])
        // `ss -xpn`: local name and inode, peer inode, holders.
        const unix = spawnSync("ss", ["-xapn"], { encoding: "utf8" }).stdout.split("\n").slice(1).map((line) =>
          line.trim().split(/\s+/)
        ).filter((cols) => cols.length >= 8)
        for (const inode of sockets) {
          const row = unix.find((cols) => cols[5] === inode)
          assert.isDefined(row, `socket ${inode} listed`)
          assert.strictEqual(row![4], "*", `socket ${inode} has no name: ${row!.join(" ")}`)
          assert.notStrictEqual(row![1], "LISTEN")
        }
        // Its requests (fd 0): the other end is held by this process alone.
        const requests = /^socket:\[(\d+)\]$/.exec(FsSync.readlinkSync(`/proc/${spawner}/fd/0`))?.[1]
        assert.isDefined(requests)
        const peer = unix.find((cols) => cols[5] === requests)![7]!
        const holders = holdersOf(`socket:[${peer}]`).map(([pid]) => pid)
        assert.deepStrictEqual([...new Set(holders)], [process.pid])

        // The pipes it hands over are opened through /proc/<spawner>/fd: root's alone, not an
        // unprivileged user's nor the sandboxes' uid's.
        for (const uid of [65534, config.uidBase]) {
          const tried = spawnSync("/bin/sh", ["-c", `ls /proc/${spawner}/fd && echo listed`], {
            uid,
            gid: uid,
            encoding: "utf8"
          })
          assert.notInclude(tried.stdout, "listed", `uid ${uid} reached the spawner's descriptors`)
          assert.include(tried.stderr, "Permission denied")
        }
        // It still serves, unharmed.
        assert.strictEqual(Spawner.status().pid, spawner)
        assert.strictEqual(text((yield* driver.exec(id, sh("echo fine"))).stdout), "fine\n")
      }).pipe(Effect.scoped))

    it.effect("splice: bytes move between a connection and a command's pipe either way, by the kernel, in a child of the spawner that runs as nobody; a reset, an idle connection and an abort end it", () =>
      Effect.gen(function*() {
        yield* TestDriver
        const spawner = runningSpawner()
        const pair = yield* Effect.promise(() => connectedPair())
        const pipeFd = (socket: Net.Socket | null) => {
          const fd = descriptorOf(socket!)
          assert.isDefined(fd)
          return fd!
        }
        /** The spawner's children that are forks of it (a splice's), not programs it started. */
        const splicers = Effect.sync(() =>
          FsSync.readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number).filter((pid) => {
            try {
              return ppidOf(pid) === spawner &&
                FsSync.readFileSync(`/proc/${pid}/comm`, "utf8").startsWith("svc-spawner")
            } catch {
              return false
            }
          })
        )
        const wait = (child: Spawner.Spawned) => new Promise<void>((resolve) => child.once("close", () => resolve()))

        // Up: 8 MiB from the connection into `sha256sum`'s stdin.
        const bytes = randomBytes(8 * 1024 * 1024)
        const summer = yield* Effect.promise(() =>
          Spawner.spawn("/usr/bin/sha256sum", [], { env: {}, stdio: ["in", "out", "ignore"] })
        )
        stopReading(pair.server)
        const up = Spawner.splice(pipeFd(pair.server), pipeFd(summer.stdin as Net.Socket), 0)
        pair.client.end(bytes)
        assert.strictEqual(yield* Effect.promise(() => up), bytes.length)
        summer.stdin!.end()
        const sum: Array<Buffer> = []
        summer.stdout!.on("data", (chunk: Buffer) => sum.push(chunk))
        yield* Effect.promise(() => wait(summer))
        assert.strictEqual(
          Buffer.concat(sum).toString("latin1").split(" ")[0],
          createHash("sha256").update(bytes).digest("hex")
        )

        // Down: a command's stdout into the connection, every byte, then its end.
        const down = yield* Effect.promise(() => connectedPair())
        const producer = yield* Effect.promise(() =>
          Spawner.spawn("/bin/sh", ["-c", "yes abcdefg | head -c 8388608"], {
            env: { PATH: "/usr/bin:/bin" },
            stdio: ["ignore", "out", "ignore"]
          })
        )
        const received: Array<Buffer> = []
        down.client.on("data", (chunk: Buffer) => received.push(chunk))
        const ahead = stopReading(producer.stdout as Net.Socket)
        down.server.write(Buffer.concat(ahead))
        const moved = yield* Effect.promise(() =>
          Spawner.splice(pipeFd(producer.stdout as Net.Socket), pipeFd(down.server), 0)
        )
        down.server.end()
        yield* Effect.promise(() => new Promise<void>((resolve) => down.client.once("end", () => resolve())))
        assert.strictEqual(moved + Buffer.concat(ahead).length, 8388608)
        assert.isTrue(Buffer.concat(received).equals(Buffer.from("abcdefg\n".repeat(1048576))))

        // Idle: nothing sent for the bound is ETIMEDOUT. Meanwhile the child is seen as it runs:
        // the spawner's, as nobody, no new privileges, holding the two descriptors and no other.
        const idle = yield* Effect.promise(() => connectedPair())
        const sink = yield* Effect.promise(() =>
          Spawner.spawn("/bin/cat", [], { env: {}, stdio: ["in", "ignore", "ignore"] })
        )
        stopReading(idle.server)
        const stalled = Spawner.splice(pipeFd(idle.server), pipeFd(sink.stdin as Net.Socket), 1500).then(
          () => undefined,
          (e: Spawner.SpawnFailed) => e
        )
        const [child] = yield* eventually(splicers, (found) => found.length === 1)
        const status = FsSync.readFileSync(`/proc/${child}/status`, "utf8")
        assert.match(status, /^Uid:\s+65534\s+65534\s+65534\s+65534$/m)
        assert.match(status, /^NoNewPrivs:\s+1$/m)
        assert.sameMembers(FsSync.readdirSync(`/proc/${child}/fd`), ["2", "3", "4", "5"])
        const timedOut = yield* Effect.promise(() => stalled)
        assert.instanceOf(timedOut, Spawner.SpawnFailed)
        assert.strictEqual(timedOut!.errno, 110)

        // Reset: the connection's peer resets mid-transfer: ECONNRESET, never a clean end.
        const reset = yield* Effect.promise(() => connectedPair())
        stopReading(reset.server)
        const cut = Spawner.splice(pipeFd(reset.server), pipeFd(sink.stdin as Net.Socket), 0).then(
          () => undefined,
          (e: Spawner.SpawnFailed) => e
        )
        reset.client.write(randomBytes(64 * 1024))
        yield* Effect.sleep(100)
        reset.client.resetAndDestroy()
        const failed = yield* Effect.promise(() => cut)
        assert.instanceOf(failed, Spawner.SpawnFailed)
        assert.strictEqual(failed!.errno, 104)

        // Aborted: the child is killed, the promise fails at once.
        const abort = yield* Effect.promise(() => connectedPair())
        stopReading(abort.server)
        const controller = new AbortController()
        const aborted = Spawner.splice(pipeFd(abort.server), pipeFd(sink.stdin as Net.Socket), 0, controller.signal)
          .then(() => "done", () => "failed")
        yield* Effect.sleep(100)
        controller.abort()
        assert.strictEqual(yield* Effect.promise(() => aborted), "failed")
        yield* eventually(splicers, (found) => found.length === 0)
        sink.stdin!.end()
        for (const p of [pair, down, idle, reset, abort]) {
          p.client.destroy()
          p.server.destroy()
        }
      }))
  }
)
