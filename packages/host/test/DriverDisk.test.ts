/**
 * `diskGb` enforced: each sandbox's writable layer is an ext4 image of that size on a loop device
 * mounted only in the sandbox's own mount namespace. Tried from inside real sandboxes, the way a
 * tenant would: fill the disk, exhaust the inodes, fill /dev/shm.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync, spawn, spawnSync } from "node:child_process"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { isAttached } from "../src/Driver/Disk.ts"
import { makeTestDriver, processExists, sh, spec, TestDriver, text, uniqueId, withSandbox } from "./fixtures/support.ts"

const GIB = 1024 ** 3

const imageOf = (dataDir: string, sandboxId: string) => NodePath.join(dataDir, "sandboxes", sandboxId, "disk.img")

/** What `losetup -a` lists under a data dir (every loop device of the machine, filtered). */
const loopDevicesUnder = (dataDir: string) =>
  execFileSync("losetup", ["-a"], { encoding: "utf8" }).split("\n").filter((line) => line.includes(dataDir))

/** Free bytes for an unprivileged user on the file system holding `dir`. */
const hostFree = (dir: string) => Effect.promise(() => Fs.statfs(dir).then((s) => s.bavail * s.bsize))

/** After a sandbox's processes were killed, the kernel detaches its loop device with the namespace. */
const waitDetached = (image: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 250 && isAttached(image); i++) yield* Effect.sleep(20)
    assert.isFalse(isAttached(image), `${image} still attached`)
  })

layer(TestDriver.layer(), { excludeTestServices: true })("SandboxDriver disk (bubblewrap)", (it) => {
  it.effect(
    "writing past diskGb fails inside with ENOSPC, the host gives at most diskGb, the sandbox lives on",
    () =>
      Effect.gen(function*() {
        const { config, driver, dataDir } = yield* TestDriver
        const id = uniqueId("fill")
        const info = yield* withSandbox(driver, spec(id, { diskGb: 1 }))
        assert.strictEqual(info.limits.disk, "applied")
        const image = imageOf(dataDir, id)
        assert.strictEqual(FsSync.statSync(image).size, GIB)
        // The host's mount table never shows the image; only the sandbox's namespace has it.
        assert.notInclude(FsSync.readFileSync("/proc/self/mountinfo", "utf8"), NodePath.join(dataDir, "sandboxes", id))

        const freeBefore = yield* hostFree(dataDir)
        const filled = yield* driver.exec(
          id,
          sh("dd if=/dev/zero of=/root/big bs=1M count=2048; s=$?; sync; exit $s", { timeoutMs: 300_000 })
        )
        assert.notStrictEqual(filled.exitCode, 0)
        assert.include(text(filled.stderr), "No space left on device")
        const written = Number(text((yield* driver.exec(id, sh("stat -c %s /root/big"))).stdout).trim())
        assert.isAbove(written, 0.8 * GIB)
        assert.isAtMost(written, GIB)
        // The image is sparse: it holds what was written, never more than its size.
        assert.isAtMost(FsSync.statSync(image).blocks * 512, GIB)
        // dd wanted 2 GiB: the host's free space fell by about 1 (others share this file system).
        const freeAfter = yield* hostFree(dataDir)
        assert.isBelow(freeBefore - freeAfter, 1.5 * GIB)

        // The file API on a full disk: the sandbox's kernel refused it with ENOSPC, and says so (no_space,
        // the API's 507; not a host failure).
        const refused = yield* Effect.flip(
          driver.writeFile(id, "/root/more", new Uint8Array(8 * 1024 * 1024).fill(120))
        )
        assert.strictEqual(refused._tag, "SandboxFileError")
        assert.strictEqual((refused as { reason?: string }).reason, "no_space")
        assert.strictEqual((refused as { errno?: string }).errno, "ENOSPC")

        // Full, the sandbox still runs commands; freed, it writes again.
        const after = yield* driver.exec(
          id,
          sh("rm /root/big && echo still here > /root/after && cat /root/after && df -k / | tail -1")
        )
        assert.strictEqual(after.exitCode, 0, text(after.stderr))
        const [first, df] = text(after.stdout).split("\n")
        assert.strictEqual(first, "still here")
        // The image's upper/ (the sandbox's /) belongs to the sandbox's root.
        assert.strictEqual(text((yield* driver.exec(id, sh("stat -c '%u %a' /"))).stdout), "0 755\n")
        // On the image, what the sandbox's root writes belongs to the unprivileged files' range
        // (the host sees it through the sandbox's root as the sandbox's own range).
        const monitor = Number(/^PPid:\s*(\d+)$/m.exec(FsSync.readFileSync(`/proc/${info.pid}/status`, "utf8"))![1])
        const onImage = `/proc/${monitor}/root${
          NodePath.join(dataDir, "sandboxes", id, "disk", "upper", "root", "after")
        }`
        assert.strictEqual(FsSync.statSync(onImage).uid, config.uidBase)
        // `df` inside sees the sandbox's own disk (the overlay reports its upper file system).
        const totalKb = Number(df!.trim().split(/\s+/)[1])
        assert.isAbove(totalKb, 0.9 * 1024 * 1024)
        assert.isAtMost(totalKb, 1024 * 1024)
      }),
    { timeout: 300_000 }
  )

  it.effect("an inode bomb ends at the file system's inode count; the sandbox lives on", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("inodes")
      yield* withSandbox(driver, spec(id, { diskGb: 1 }))
      const bomb = yield* driver.exec(
        id,
        sh("mkdir /root/f && cd /root/f && i=0; while true > $i; do i=$((i+1)); done; echo $i", { timeoutMs: 300_000 })
      )
      const made = Number(text(bomb.stdout).trim())
      assert.include(text(bomb.stderr), "No space left on device")
      // 65,536 inodes per GiB, a few taken by the file system and the sandbox's folders.
      assert.isAbove(made, 60_000)
      assert.isAtMost(made, 65_536)
      const full = yield* driver.exec(id, sh("echo x > /root/one-more"))
      assert.notStrictEqual(full.exitCode, 0)
      assert.include(text(full.stderr), "No space left on device")
      const freed = yield* driver.exec(id, sh("rm -rf /root/f && echo x > /root/one-more && cat /root/one-more"))
      assert.strictEqual(text(freed.stdout), "x\n", text(freed.stderr))
    }), { timeout: 300_000 })

  it.effect("/dev/shm holds at most half the memory limit and /dev is read-only: the init is not OOM-killed", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("shm")
      const info = yield* withSandbox(driver, spec(id, { ramMb: 256 }))
      const shm = yield* driver.exec(id, sh("dd if=/dev/zero of=/dev/shm/x bs=1M count=512"))
      assert.notStrictEqual(shm.exitCode, 0)
      assert.include(text(shm.stderr), "No space left on device")
      const size = yield* driver.exec(id, sh("stat -c %s /dev/shm/x"))
      assert.strictEqual(Number(text(size.stdout).trim()), 128 * 1024 * 1024)
      const dev = yield* driver.exec(id, sh("echo x > /dev/filler"))
      assert.include(text(dev.stderr), "Read-only file system")
      // The devices still work, and so does the sandbox (its init alive).
      const still = yield* driver.exec(id, sh("rm /dev/shm/x && echo ok > /dev/null && echo ok"))
      assert.strictEqual(text(still.stdout), "ok\n", text(still.stderr))
      assert.isTrue(processExists(info.pid!))
    }))

  it.effect("data survives stop and start and a reboot (processes and loop device gone); destroy leaves no loop device and no image", () =>
    Effect.gen(function*() {
      const { driver, dataDir } = yield* TestDriver
      const id = uniqueId("keep")
      const image = imageOf(dataDir, id)
      const made = yield* withSandbox(driver, spec(id, { diskGb: 2 }))
      assert.strictEqual(made.limits.disk, "applied")
      assert.strictEqual(FsSync.statSync(image).size, 2 * GIB)
      const wrote = yield* driver.exec(
        id,
        sh("dd if=/dev/urandom of=/root/data bs=1M count=8 2>/dev/null && md5sum /root/data")
      )
      const sum = text(wrote.stdout)
      assert.match(sum, /^[0-9a-f]{32} /)
      assert.lengthOf(loopDevicesUnder(dataDir), 1)

      yield* driver.stop(id)
      assert.deepStrictEqual(loopDevicesUnder(dataDir), [])
      const started = yield* driver.start(id)
      assert.strictEqual(started.limits.disk, "applied")
      assert.strictEqual(text((yield* driver.exec(id, sh("md5sum /root/data"))).stdout), sum)

      // A reboot: every process of the sandbox gone at once, its loop device with them.
      process.kill(started.pid!, "SIGKILL")
      while (processExists(started.pid!)) yield* Effect.sleep(10)
      yield* waitDetached(image)
      assert.deepStrictEqual((yield* driver.list).map((row) => [row.sandboxId, row.status]), [[id, "stopped"]])
      const again = yield* driver.start(id)
      assert.strictEqual(again.limits.disk, "applied")
      assert.strictEqual(text((yield* driver.exec(id, sh("md5sum /root/data"))).stdout), sum)
      assert.lengthOf(loopDevicesUnder(dataDir), 1)

      yield* driver.destroy(id)
      assert.deepStrictEqual(loopDevicesUnder(dataDir), [])
      assert.isFalse(FsSync.existsSync(image))
      assert.isFalse(FsSync.existsSync(NodePath.join(dataDir, "sandboxes", id)))
    }))

  it.effect("adopt: a pool entry of the same diskGb keeps its disk and gets /dev/shm for its new memory limit; another diskGb is refused", () =>
    Effect.gen(function*() {
      const { driver, dataDir } = yield* TestDriver
      const poolId = uniqueId("pool")
      const id = uniqueId("adopted")
      yield* Effect.addFinalizer(() => Effect.all([driver.destroy(poolId), driver.destroy(id)]).pipe(Effect.ignore))
      yield* driver.create(spec(poolId, { diskGb: 1, ramMb: 256 }))
      yield* driver.exec(poolId, sh("echo from the pool > /root/mark"))

      const refused = yield* Effect.flip(driver.adopt(poolId, spec(uniqueId("bigger"), { diskGb: 2 })))
      assert.strictEqual(refused._tag, "InvalidSandboxRequest")
      assert.include(refused.message, "disk of 1 GiB, not 2")
      assert.strictEqual((yield* driver.exec(poolId, sh("cat /root/mark"))).exitCode, 0)

      const info = yield* driver.adopt(poolId, spec(id, { diskGb: 1, ramMb: 128 }))
      assert.strictEqual(info.limits.disk, "applied")
      const inside = yield* driver.exec(
        id,
        sh("cat /root/mark; hostname; grep ' /dev/shm ' /proc/self/mountinfo; df -k / | tail -1")
      )
      const [mark, hostname, shm, df] = text(inside.stdout).split("\n")
      assert.strictEqual(mark, "from the pool")
      assert.strictEqual(hostname, id)
      assert.include(shm, "size=65536k")
      // Remounted with its flags kept.
      const flags = shm!.split(" ")[5]!.split(",")
      assert.includeMembers(flags, ["rw", "nosuid", "nodev"])
      assert.isAtMost(Number(df!.trim().split(/\s+/)[1]), 1024 * 1024)
      const filled = yield* driver.exec(id, sh("dd if=/dev/zero of=/dev/shm/x bs=1M count=100"))
      assert.include(text(filled.stderr), "No space left on device")

      const image = imageOf(dataDir, id)
      assert.isTrue(isAttached(FsSync.realpathSync(image)))
      yield* driver.destroy(id)
      assert.deepStrictEqual(loopDevicesUnder(dataDir), [])
      assert.isFalse(FsSync.existsSync(NodePath.join(dataDir, "sandboxes", id)))
    }))

  it.effect("a running sandbox's image cannot be attached a second time (two file systems over one image)", () =>
    Effect.gen(function*() {
      const { driver, dataDir } = yield* TestDriver
      const id = uniqueId("twice")
      yield* withSandbox(driver, spec(id))
      const hostDir = NodePath.join(dataDir, "host")
      const mounter = FsSync.readdirSync(hostDir).find((name) => /^svc-disk-mount-[0-9a-f]+$/.test(name))!
      const target = yield* Effect.promise(() => Fs.mkdtemp(NodePath.join(dataDir, "second-")))
      const second = spawnSync("unshare", [
        "--mount",
        "--propagation",
        "private",
        NodePath.join(hostDir, mounter),
        imageOf(dataDir, id),
        target
      ], {
        encoding: "utf8"
      })
      assert.strictEqual(second.status, 1)
      assert.include(second.stderr, "is still attached to a loop device")
      assert.lengthOf(loopDevicesUnder(dataDir), 1)
      assert.strictEqual(text((yield* driver.exec(id, sh("echo fine"))).stdout), "fine\n")
    }))

  it.effect("a 1 GiB create takes a blank image formatted ahead, and the stock refills; other sizes format their own", () =>
    Effect.gen(function*() {
      const { driver, dataDir } = yield* TestDriver
      const stockDir = NodePath.join(dataDir, "disk-stock")
      const stock = () => FsSync.readdirSync(stockDir).filter((name) => name.endsWith(".img"))
      const inodes = () => new Set(stock().map((name) => FsSync.statSync(NodePath.join(stockDir, name)).ino))
      const full = () =>
        Effect.gen(function*() {
          for (let i = 0; i < 500 && stock().length < 4; i++) yield* Effect.sleep(20)
          assert.lengthOf(stock(), 4)
        })
      yield* full()
      const before = inodes()
      const id = uniqueId("stocked")
      yield* withSandbox(driver, spec(id, { diskGb: 1 }))
      // The sandbox's image is one of the stock's files, renamed (same inode), and it works.
      assert.isTrue(before.has(FsSync.statSync(imageOf(dataDir, id)).ino))
      assert.strictEqual(text((yield* driver.exec(id, sh("echo ok > /root/x && cat /root/x"))).stdout), "ok\n")
      yield* full()
      assert.strictEqual([...inodes()].filter((ino) => !before.has(ino)).length, 1)

      const bigger = uniqueId("bigger")
      const stocked = inodes()
      yield* withSandbox(driver, spec(bigger, { diskGb: 2 }))
      assert.strictEqual(FsSync.statSync(imageOf(dataDir, bigger)).size, 2 * GIB)
      assert.deepStrictEqual(inodes(), stocked)
    }))

  it.effect("a sandbox made before disk images (plain upper/ folder) still starts, and says its disk is not enforced", () =>
    Effect.gen(function*() {
      const { driver, dataDir } = yield* TestDriver
      const id = uniqueId("legacy")
      yield* withSandbox(driver, spec(id))
      yield* driver.stop(id)
      // The layout of a sandbox made by an earlier driver: no image, upper/ and work/ folders.
      const dir = NodePath.join(dataDir, "sandboxes", id)
      yield* Effect.promise(async () => {
        await Fs.rm(NodePath.join(dir, "disk.img"))
        await Fs.rm(NodePath.join(dir, "disk"), { recursive: true })
        await Fs.mkdir(NodePath.join(dir, "upper", "root"), { recursive: true, mode: 0o700 })
        await Fs.mkdir(NodePath.join(dir, "work"), { mode: 0o700 })
        await Fs.writeFile(NodePath.join(dir, "upper", "root", "old"), "from before\n")
      })
      const started = yield* driver.start(id)
      assert.match(started.limits.disk, /^not enforced: /)
      assert.strictEqual(text((yield* driver.exec(id, sh("cat /root/old"))).stdout), "from before\n")
    }))
})

const agentScript = NodePath.join(NodePath.dirname(fileURLToPath(import.meta.url)), "fixtures", "agent.ts")

describe("SandboxDriver disk after an agent crash", () => {
  it.live("an agent killed -9 leaves the disk mounted in the sandbox only; a restarted driver stops, starts and destroys it cleanly", () =>
    Effect.gen(function*() {
      const restarted = yield* makeTestDriver()
      const id = uniqueId("orphan")
      const agent = yield* Effect.acquireRelease(
        Effect.callback<{ child: ReturnType<typeof spawn>; pid: number }, Error>((resume) => {
          const child = spawn(process.execPath, [agentScript, restarted.dataDir, restarted.hostId, id], {
            stdio: ["ignore", "pipe", "pipe"]
          })
          let out = ""
          let err = ""
          child.stderr!.on("data", (chunk: Buffer) => (err += chunk.toString()))
          child.stdout!.on("data", (chunk: Buffer) => {
            out += chunk.toString()
            if (out.includes("\n")) {
              resume(Effect.succeed({ child, pid: (JSON.parse(out.split("\n")[0]!) as { pid: number }).pid }))
            }
          })
          child.on("exit", (code) => resume(Effect.fail(new Error(`agent exited ${code}: ${err}`))))
        }),
        ({ child }) => Effect.sync(() => child.kill("SIGKILL"))
      )
      agent.child.kill("SIGKILL")
      yield* Effect.callback<void>((resume) => {
        if (agent.child.exitCode !== null || agent.child.signalCode !== null) resume(Effect.void)
        else agent.child.on("exit", () => resume(Effect.void))
      })
      const image = FsSync.realpathSync(imageOf(restarted.dataDir, id))
      assert.isTrue(processExists(agent.pid))
      assert.isTrue(isAttached(image))

      // The driver below was built before the sandbox existed: all it knows comes from disk.
      const read = yield* restarted.driver.exec(id, sh("cat /root/from-first-agent; echo; df -k / | tail -1"))
      const [kept, df] = text(read.stdout).split("\n")
      assert.strictEqual(kept, "still here")
      assert.isAtMost(Number(df!.trim().split(/\s+/)[1]), 1024 * 1024)
      yield* restarted.driver.stop(id)
      assert.isFalse(isAttached(image))
      const started = yield* restarted.driver.start(id)
      assert.strictEqual(started.limits.disk, "applied")
      assert.strictEqual(
        text((yield* restarted.driver.exec(id, sh("cat /root/from-first-agent"))).stdout),
        "still here"
      )
      yield* restarted.driver.destroy(id)
      assert.deepStrictEqual(loopDevicesUnder(restarted.dataDir), [])
      assert.isFalse(FsSync.existsSync(image))
    }))
})
