/**
 * Limits and the end of a run, tried from inside real sandboxes: memory (a process allocating
 * past ram_mb is OOM-killed, the sandbox lives on), pids (a fork loop stops at pids.max), CPU (busy
 * loops stay under the quota), and an init that dies (killed from the host, OOM-killed) noticed
 * with its reason. The cgroup version is detected (v1 on these machines); the v2 writer is checked
 * against the kernel's documented files under a folder standing in for its root.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Duration, Effect, Fiber } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import * as Cgroups from "../src/Driver/Cgroups.ts"
import { describeExit } from "../src/Driver/Ended.ts"
import { vethNames } from "../src/Driver/Network.ts"
import {
  cgroupDirs,
  exec,
  interfaceExists,
  makeTestDriver,
  processExists,
  sh,
  spec,
  staticProbe,
  TestDriver,
  text,
  uniqueId,
  withSandbox
} from "./fixtures/support.ts"

const cpuUsageNs = (hostId: string, id: string) =>
  Number(FsSync.readFileSync(NodePath.join(cgroupDirs(hostId, id)[2]!, "cpuacct.usage"), "utf8").trim())

const oomKills = (hostId: string, id: string) =>
  Number(
    /^oom_kill (\d+)$/m.exec(
      FsSync.readFileSync(NodePath.join(cgroupDirs(hostId, id)[0]!, "memory.oom_control"), "utf8")
    )?.[1]
  )

/** Polls `ended` as the agent does, until the driver finds the run over. */
const waitEnded = (driver: TestDriver["Service"]["driver"], id: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200; i++) {
      const exit = yield* driver.ended(id)
      if (exit !== undefined) return exit
      yield* Effect.sleep(Duration.millis(50))
    }
    return yield* Effect.die(new Error(`${id}: the run did not end`))
  })

layer(TestDriver.layer(), { excludeTestServices: true, timeout: 120_000 })(
  "SandboxDriver limits (bubblewrap)",
  (it) => {
    it.effect("finds cgroup v1 on this host and every limit enforced", () =>
      Effect.gen(function*() {
        const { driver } = yield* TestDriver
        assert.strictEqual(Cgroups.detect("/sys/fs/cgroup"), "v1")
        assert.deepStrictEqual(driver.hostLimits, {
          cgroup: "v1",
          memory: "enforced",
          cpu: "enforced",
          pids: "enforced",
          disk: "enforced"
        })
      }))

    it.effect("memory: a process allocating past ram_mb is OOM-killed inside, the sandbox lives on", () =>
      Effect.gen(function*() {
        const { driver, hostId } = yield* TestDriver
        const id = uniqueId("mem")
        const info = yield* withSandbox(driver, spec(id, { ramMb: 64 }))
        assert.strictEqual(info.limits.memory, "applied")
        const hog = yield* driver.exec(
          id,
          exec(["dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"], { timeoutMs: 30_000 })
        )
        assert.strictEqual(hog.exitCode, 137, text(hog.stderr))
        assert.isAbove(oomKills(hostId, id), 0)
        // Within the limit is fine, and the init was not the one killed.
        assert.strictEqual(
          (yield* driver.exec(id, exec(["dd", "if=/dev/zero", "of=/dev/null", "bs=16M", "count=1"]))).exitCode,
          0
        )
        assert.isUndefined(yield* driver.ended(id))
        assert.isTrue(processExists(info.pid!))
      }))

    it.effect("cpu: busy loops in a cpu 1 sandbox use at most about one core of the two", () =>
      Effect.gen(function*() {
        const { driver, hostId } = yield* TestDriver
        const id = uniqueId("cpu")
        const info = yield* withSandbox(driver, spec(id, { cpu: 1 }))
        assert.strictEqual(info.limits.cpu, "applied")
        assert.strictEqual(
          FsSync.readFileSync(NodePath.join(cgroupDirs(hostId, id)[1]!, "cpu.cfs_quota_us"), "utf8").trim(),
          "100000"
        )
        // Four loops: unlimited, they would take both cores of this machine.
        const busy = yield* Effect.forkChild(
          driver.exec(id, sh("for i in 1 2 3 4; do (while :; do :; done) & done; sleep 30", { timeoutMs: 4_000 }))
        )
        yield* Effect.sleep(Duration.millis(700))
        const before = { ns: cpuUsageNs(hostId, id), at: process.hrtime.bigint() }
        yield* Effect.sleep(Duration.seconds(1))
        const after = { ns: cpuUsageNs(hostId, id), at: process.hrtime.bigint() }
        const cores = (after.ns - before.ns) / Number(after.at - before.at)
        // A limit check, not a benchmark: one core's quota plus slack; above zero shows the loops ran.
        assert.isBelow(cores, 1.3, `cores used: ${cores}`)
        assert.isAbove(cores, 0.1, `cores used: ${cores}`)
        const result = yield* Fiber.join(busy)
        assert.isTrue(result.timedOut)
        assert.strictEqual((yield* driver.exec(id, exec(["true"]))).exitCode, 0)
      }))

    it.effect("describes how an init ended", () =>
      Effect.sync(() => {
        assert.strictEqual(describeExit(137, 1, 256), "out of memory at ram_mb 256")
        assert.strictEqual(describeExit(undefined, 2, 64), "out of memory at ram_mb 64")
        assert.strictEqual(describeExit(137, 0, 256), "killed by signal 9")
        assert.strictEqual(describeExit(143, 1, 256), "killed by signal 15")
        assert.strictEqual(describeExit(3, 1, 256), "exited with code 3")
        assert.strictEqual(describeExit(0, 0, 256), "exited with code 0")
      }))

    it.effect("an init killed from the host: noticed with its signal, torn down, started again", () =>
      Effect.gen(function*() {
        const { driver, hostId } = yield* TestDriver
        const id = uniqueId("kill")
        const info = yield* withSandbox(driver, spec(id))
        yield* driver.writeFile(id, "/root/kept", new TextEncoder().encode("still here"))
        assert.isUndefined(yield* driver.ended(id))
        process.kill(info.pid!, "SIGKILL")
        const exit = yield* waitEnded(driver, id)
        assert.strictEqual(exit.reason, "killed by signal 9")
        assert.strictEqual(exit.exitCode, 137)
        assert.isFalse(exit.outOfMemory)
        // Nothing of the run is left; the file system is.
        assert.strictEqual((yield* Effect.flip(driver.exec(id, exec(["true"]))))._tag, "SandboxNotRunning")
        for (const dir of cgroupDirs(hostId, id)) assert.isFalse(FsSync.existsSync(dir), dir)
        assert.isFalse(interfaceExists(vethNames(info.internalIp).host))
        assert.deepStrictEqual((yield* driver.list).find((r) => r.sandboxId === id)?.status, "stopped")
        // Asked again (a restarted agent), the same answer from the disk.
        assert.strictEqual((yield* driver.ended(id))?.reason, "killed by signal 9")

        const again = yield* driver.start(id)
        assert.notStrictEqual(again.pid, info.pid)
        assert.isUndefined(yield* driver.ended(id))
        assert.strictEqual(text((yield* driver.exec(id, exec(["cat", "/root/kept"]))).stdout), "still here")
        // A stop is not an end of its own.
        yield* driver.stop(id)
        assert.isUndefined(yield* driver.ended(id))
      }))

    it.effect("root inside stops its own sandbox with poweroff (SIGUSR2 to pid 1), never with kill -9 1", () =>
      Effect.gen(function*() {
        const { driver } = yield* TestDriver
        const id = uniqueId("poweroff")
        yield* withSandbox(driver, spec(id))
        yield* driver.exec(id, exec(["kill", "-9", "1"]))
        assert.strictEqual((yield* driver.exec(id, exec(["true"]))).exitCode, 0)
        yield* driver.exec(id, exec(["poweroff"])).pipe(Effect.result)
        const exit = yield* waitEnded(driver, id)
        assert.strictEqual(exit.reason, "killed by signal 12")
        yield* driver.start(id)
        assert.strictEqual((yield* driver.exec(id, exec(["true"]))).exitCode, 0)
      }))

    it.effect("an init OOM-killed (an allocation past ram_mb): out of memory at its ram_mb", () =>
      Effect.gen(function*() {
        const { driver, hostId } = yield* TestDriver
        const id = uniqueId("oom")
        yield* withSandbox(driver, spec(id, { ramMb: 64 }))
        // The init made the OOM killer's first choice (raising a score needs no privilege), so
        // the kill that ends the sandbox is certain: eight dd's hold 16 MB buffers each (blocked on
        // a pipe nobody reads), none scoring above the init. (/dev/shm can no longer fill the
        // group: it holds half of ram_mb, DriverDisk.test.ts.)
        const fill = yield* driver.exec(
          id,
          sh(
            "echo 1000 > /proc/1/oom_score_adj && for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero bs=16M count=1 2>/dev/null | sleep 30 & done; wait",
            { timeoutMs: 30_000 }
          )
        ).pipe(Effect.result)
        const exit = yield* waitEnded(driver, id)
        assert.strictEqual(exit.reason, "out of memory at ram_mb 64", JSON.stringify({ exit, fill }))
        assert.isTrue(exit.outOfMemory)
        for (const dir of cgroupDirs(hostId, id)) assert.isFalse(FsSync.existsSync(dir), dir)
        yield* driver.start(id)
        const shm = yield* driver.exec(id, exec(["ls", "/dev/shm"]))
        assert.strictEqual(text(shm.stdout), "")
        assert.isUndefined(yield* driver.ended(id))
      }))

    it.effect("a run that ended while no agent watched is found ended by the next driver", () =>
      Effect.gen(function*() {
        const first = yield* TestDriver
        const id = uniqueId("late")
        const info = yield* withSandbox(first.driver, spec(id))
        process.kill(info.pid!, "SIGKILL")
        yield* Effect.sleep(Duration.millis(200))
        const second = yield* makeTestDriver({ dataDir: first.dataDir, hostId: first.hostId })
        const exit = yield* waitEnded(second.driver, id)
        assert.strictEqual(exit.reason, "killed by signal 9")
      }))

    it.effect("descriptors: each process inside stops at nofile, root cannot raise it; all sandboxes together stay below fs.file-max", () =>
      Effect.gen(function*() {
        const { driver, config } = yield* makeTestDriver({ driverConfig: { nofile: 512 } })
        const id = uniqueId("nofile")
        yield* withSandbox(driver, spec(id, { ramMb: 1024 }))
        yield* driver.writeFile(id, "/root/flood", yield* staticProbe("fd-flood"), 0o755)
        const result = yield* driver.exec(id, exec(["/root/flood"], { timeoutMs: 30_000 }))
        const out = text(result.stdout)
        assert.strictEqual(result.exitCode, 0, `${out} ${text(result.stderr)}`)
        // Before: 20000 (the agent's own limit), and root could raise it up to fs.nr_open.
        assert.match(out, /^limit 512 512$/m)
        assert.match(out, /^raise EPERM$/m)
        const opened = [...out.matchAll(/^opened (\d+) (\S+)$/gm)]
        assert.strictEqual(opened.length, 4, out)
        for (const [, count, errno] of opened) {
          // 3 of stdio, plus the pipe ends each holds.
          assert.isAtLeast(Number(count), 512 - 12, out)
          assert.isAtMost(Number(count), 512 - 3, out)
          assert.strictEqual(errno, "EMFILE", out)
        }
        // An exec gets the init's limit too (svc-enter sets it before the command runs).
        const shell = yield* driver.exec(id, sh("ulimit -n; ulimit -Hn; cat /proc/1/limits | grep 'open files'"))
        assert.match(text(shell.stdout), /^512\n512\nMax open files\s+512\s+512\s+files/, text(shell.stdout))

        // The machine-wide bounds: the sandboxes' processes together below pid_max, and their
        // descriptors (processes × nofile) below fs.file-max with the host's own share left.
        const readInt = (file: string) => Number(FsSync.readFileSync(file, "utf8").trim())
        const cap = Cgroups.sandboxesPidsCap(
          readInt("/proc/sys/kernel/pid_max"),
          readInt("/proc/sys/kernel/threads-max")
        )
        assert.isBelow(cap, readInt("/proc/sys/kernel/pid_max"))
        assert.strictEqual(readInt("/sys/fs/cgroup/pids/svc-sandboxes/pids.max"), cap)
        assert.isAbove(readInt("/proc/sys/fs/file-max"), cap * config.nofile)
      }))

    it.effect("pids: a fork loop stops at pids.max, the sandbox lives on", () =>
      Effect.gen(function*() {
        const { driver, hostId } = yield* makeTestDriver({ pidsMax: 64 })
        const id = uniqueId("pids")
        const info = yield* withSandbox(driver, spec(id))
        assert.strictEqual(info.limits.pids, "applied")
        assert.strictEqual(
          FsSync.readFileSync(NodePath.join(cgroupDirs(hostId, id)[3]!, "pids.max"), "utf8").trim(),
          "64"
        )
        // `echo` is a builtin: each line is one more process; the shell gives up at the first failed fork.
        const bomb = yield* driver.exec(
          id,
          sh("i=0; while [ $i -lt 300 ]; do sleep 5 & i=$((i+1)); echo $i; done", { timeoutMs: 30_000 })
        )
        const started = Number(text(bomb.stdout).trim().split("\n").at(-1))
        // The group also holds the host-side bubblewrap, the init (pid 1), the exec's entry process and the shell.
        assert.isAtMost(started, 64 - 4, text(bomb.stdout))
        assert.isAbove(started, 40, text(bomb.stdout))
        assert.match(text(bomb.stderr), /can't fork/)
        assert.isAtMost((yield* driver.stats(id)).pids, 64)
        // Once the sleeps end, the sandbox answers again.
        const answered = yield* Effect.gen(function*() {
          for (let i = 0; i < 100; i++) {
            const r = yield* driver.exec(id, exec(["true"]))
            if (r.exitCode === 0) return true
            yield* Effect.sleep(Duration.millis(200))
          }
          return false
        })
        assert.isTrue(answered)
        assert.isUndefined(yield* driver.ended(id))
      }))
  }
)

describe("cgroup v2 (a folder standing in for its root: these machines have no v2 host)", () => {
  const makeRoot = async (controllers: string) => {
    const root = await Fs.mkdtemp("/tmp/svc-cgroup-v2-")
    await Fs.writeFile(NodePath.join(root, "cgroup.controllers"), `${controllers}\n`)
    await Fs.writeFile(NodePath.join(root, "cgroup.subtree_control"), "")
    return root
  }

  it("detects v2, v1 and none", async () => {
    const root = await makeRoot("cpuset cpu io memory pids")
    try {
      assert.strictEqual(Cgroups.detect(root), "v2")
      assert.strictEqual(Cgroups.make({ root, hostId: "h" }).version, "v2")
      assert.strictEqual(Cgroups.detect(NodePath.join(root, "nothing-here")), "none")
      assert.strictEqual(Cgroups.detect("/sys/fs/cgroup"), "v1")
    } finally {
      await Fs.rm(root, { recursive: true, force: true })
    }
  })

  it("writes memory.max, memory.swap.max, cpu.max and pids.max, enabling the controllers on the way", async () => {
    const root = await makeRoot("cpuset cpu io memory pids")
    try {
      const cgroups = Cgroups.make({ root, hostId: "host-a" })
      const prepared = await cgroups.prepare("sbx-1", { ramMb: 256, cpu: 2, pidsMax: 100, diskGb: 1 })
      const dir = NodePath.join(root, "svc-sandboxes", "host-a", "sbx-1")
      const read = (file: string) => FsSync.readFileSync(NodePath.join(dir, file), "utf8")
      assert.deepStrictEqual(prepared.procsFiles, [NodePath.join(dir, "cgroup.procs")])
      assert.deepInclude(prepared.limits, { memory: "applied", cpu: "applied", pids: "applied" })
      assert.strictEqual(read("memory.max"), String(256 * 1024 * 1024))
      assert.strictEqual(read("memory.swap.max"), "0")
      assert.strictEqual(read("cpu.max"), "200000 100000")
      assert.strictEqual(read("pids.max"), "100")
      // Each level above the sandbox's group got the controllers (the last write is +pids).
      for (
        const level of [root, NodePath.join(root, "svc-sandboxes"), NodePath.join(root, "svc-sandboxes", "host-a")]
      ) {
        assert.strictEqual(FsSync.readFileSync(NodePath.join(level, "cgroup.subtree_control"), "utf8"), "+pids")
      }
      // An exec's group is a child of the sandbox's: the sandbox's limits cover it.
      const execGroup = await cgroups.execGroup("sbx-1", "x1")
      assert.deepStrictEqual(execGroup.procsFiles, [NodePath.join(dir, "x1", "cgroup.procs")])
      // What the kernel reports, read from its documented files.
      FsSync.writeFileSync(
        NodePath.join(dir, "memory.events"),
        "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n"
      )
      FsSync.writeFileSync(NodePath.join(dir, "memory.current"), "50000000\n")
      FsSync.writeFileSync(NodePath.join(dir, "memory.stat"), "anon 30000000\nfile 20000000\ninactive_file 8000000\n")
      FsSync.writeFileSync(NodePath.join(dir, "cpu.stat"), "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n")
      FsSync.writeFileSync(NodePath.join(dir, "pids.current"), "7\n")
      assert.strictEqual(await cgroups.oomKills("sbx-1"), 2)
      assert.deepStrictEqual(await cgroups.usage("sbx-1"), { memoryBytes: 42_000_000, cpuUsageNs: 1_500_000, pids: 7 })
      assert.deepStrictEqual(await cgroups.probe(), {
        cgroup: "v2",
        memory: "enforced",
        cpu: "enforced",
        pids: "enforced"
      })
    } finally {
      await Fs.rm(root, { recursive: true, force: true })
    }
  })

  it("a controller the root does not offer is reported unavailable, the others hold", async () => {
    const root = await makeRoot("cpu memory")
    try {
      const cgroups = Cgroups.make({ root, hostId: "host-b" })
      const support = await cgroups.probe()
      assert.strictEqual(support.memory, "enforced")
      assert.strictEqual(support.cpu, "enforced")
      assert.match(support.pids, /^unavailable: the pids controller is not in /)
      const prepared = await cgroups.prepare("sbx-2", { ramMb: 64, cpu: 1, pidsMax: 64, diskGb: 1 })
      assert.match(prepared.limits.pids, /^unavailable/)
      assert.isFalse(FsSync.existsSync(NodePath.join(root, "svc-sandboxes", "host-b", "sbx-2", "pids.max")))
    } finally {
      await Fs.rm(root, { recursive: true, force: true })
    }
  })
})
