/**
 * A hostile tenant inside a real sandbox: who it is on the host, which host settings it can
 * reach, which calls and capabilities it keeps, and what the host sees of its secrets. Every
 * attack runs from inside, through exec or the file API, as a tenant's code would.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"
import { execFileSync, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { capabilityHex, ID_COUNT } from "../src/Driver/Confinement.ts"
import {
  exec,
  makeTestDriver,
  sh,
  spec,
  staticProbe,
  TestDriver,
  text,
  uniqueId,
  withSandbox
} from "./fixtures/support.ts"

const statusField = (pid: number | string, field: string) => {
  try {
    return new RegExp(`^${field}:\\s*(.*)$`, "m").exec(FsSync.readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]?.trim()
  } catch {
    return undefined
  }
}

const hostPids = () => FsSync.readdirSync("/proc").filter((name) => /^\d+$/.test(name))

const readOr = (file: string) => {
  try {
    return FsSync.readFileSync(file)
  } catch {
    return Buffer.alloc(0)
  }
}

const pidNamespace = (pid: number | string) => {
  try {
    return FsSync.readlinkSync(`/proc/${pid}/ns/pid`)
  } catch {
    return undefined
  }
}

layer(TestDriver.layer(), { excludeTestServices: true })("a sandbox's identity and restrictions", (it) => {
  it.effect("root inside is an unprivileged host uid: the uid map, the owner of its files and processes, a setuid file", () =>
    Effect.gen(function*() {
      const { driver, config } = yield* TestDriver
      const id = uniqueId("uid")
      const info = yield* withSandbox(driver, spec(id))

      const maps = text((yield* driver.exec(id, sh("cat /proc/self/uid_map /proc/self/gid_map; id -u"))).stdout)
      const fields = maps.trim().split(/\s+/)
      // Its own range (`DriverUidRanges.test.ts`), above the range its files are stored as.
      const uid = Number(fields[1])
      assert.isAbove(uid, config.uidBase)
      assert.deepStrictEqual(fields, ["0", String(uid), String(ID_COUNT), "0", String(uid), String(ID_COUNT), "0"])

      // A setuid-root binary made inside is owned by the sandbox's uid on the host: it grants nothing there.
      const made = yield* driver.exec(
        id,
        sh("cp /bin/busybox /root/suid && chmod 4755 /root/suid && touch /root/plain")
      )
      assert.strictEqual(made.exitCode, 0, text(made.stderr))
      yield* driver.writeFile(id, "/root/api.txt", new TextEncoder().encode("via the file API"))
      // Its files are on its disk image, mounted in its own namespace only: the host sees them
      // through its root as its range (stored as the files' range: `DriverUidRanges.test.ts`).
      const upper = `/proc/${info.pid}/root/root`
      for (const name of ["suid", "plain", "api.txt"]) {
        const st = FsSync.statSync(NodePath.join(upper, name))
        assert.strictEqual(st.uid, uid, name)
        assert.strictEqual(st.gid, uid, name)
      }
      assert.strictEqual(FsSync.statSync(NodePath.join(upper, "suid")).mode & 0o4000, 0o4000)

      // Every process in the sandbox's pid namespace, and the bubblewrap outside it, is that uid.
      const running = yield* Effect.forkChild(driver.exec(id, exec(["sleep", "2"])))
      yield* Effect.sleep("300 millis")
      const namespace = pidNamespace(info.pid!)
      const inside = hostPids().filter((pid) => pidNamespace(pid) === namespace)
      assert.isAtLeast(inside.length, 2) // the init (pid 1), the sleep
      for (const pid of inside) {
        const uids = statusField(pid, "Uid")
        if (uids === undefined) continue // ended meanwhile
        for (const each of uids.split(/\s+/)) assert.strictEqual(Number(each), uid, `pid ${pid}: ${uids}`)
      }
      const outerBwrap = Number(statusField(info.pid!, "PPid"))
      assert.strictEqual(Number(statusField(outerBwrap, "Uid")!.split(/\s+/)[0]), uid)
      yield* Fiber.join(running)
    }))

  it.effect("root inside cannot make its init write into a host file: ptrace, /proc/1/mem, its descriptors are refused", () =>
    Effect.gen(function*() {
      const { driver, dataDir, config } = yield* TestDriver
      const id = uniqueId("init")
      const info = yield* withSandbox(driver, spec(id))
      yield* driver.writeFile(id, "/root/attack", yield* staticProbe("init-attack"), 0o755)
      const log = NodePath.join(dataDir, "sandboxes", id, "bwrap.log")
      const before = FsSync.statSync(log).size

      const result = yield* driver.exec(id, exec(["/root/attack"]))
      const out = text(result.stdout)
      assert.strictEqual(result.exitCode, 0, `${out} ${text(result.stderr)}`)
      const outcome = (name: string) => new RegExp(`^${name} (\\S+)`, "m").exec(out)?.[1]
      // The kernel's ptrace check refuses them all: the init is not dumpable and no one inside
      // holds CAP_SYS_PTRACE. (Before: both succeeded, and the injected write and fallocate
      // grew the host file.)
      assert.strictEqual(outcome("ptrace-seize"), "EPERM", out)
      assert.strictEqual(outcome("ptrace-attach"), "EPERM", out)
      assert.notMatch(out, /^inject/m)
      assert.strictEqual(outcome("proc-mem"), "EACCES", out)
      assert.strictEqual(outcome("reopen-fd1"), "EACCES", out)
      // The seccomp filter's refusals, as before.
      assert.strictEqual(outcome("pidfd-getfd"), "EPERM", out)
      assert.strictEqual(outcome("process-vm-writev"), "EPERM", out)
      // Its descriptors cannot even be named from inside.
      const links = /^links(.*)$/m.exec(out)?.[1]?.trim().split(" ").filter((link) => link !== "") ?? []
      assert.isAbove(links.length, 0, out)
      for (const link of links) assert.match(link, /^\d+=EACCES$/, out)
      assert.notInclude(out, dataDir)

      // The host file did not grow (the agent wrote it once, at the start), and nothing in the
      // sandbox holds a host file: the init's stdio is /dev/null, the start's pipe is closed.
      assert.strictEqual(FsSync.statSync(log).size, before)
      const namespace = pidNamespace(info.pid!)
      const held = hostPids().filter((pid) => pidNamespace(pid) === namespace).flatMap((pid) => {
        try {
          return FsSync.readdirSync(`/proc/${pid}/fd`).map((fd) => FsSync.readlinkSync(`/proc/${pid}/fd/${fd}`))
        } catch {
          return []
        }
      })
      assert.includeMembers(held, ["/dev/null"])
      for (const target of held) {
        assert.isFalse(target.startsWith(dataDir) || target.startsWith(config.runDir), target)
        assert.match(target, /^(\/dev\/null|pipe:|socket:|anon_inode:)/, target)
      }
    }))

  it.effect("a start that fails still says why: the start's output, read by the agent, in the error and in bwrap.log", () =>
    Effect.gen(function*() {
      const { driver, dataDir } = yield* TestDriver
      const id = uniqueId("fails")
      yield* withSandbox(driver, spec(id))
      yield* driver.stop(id)
      const base = NodePath.join(dataDir, "templates", "base")
      yield* Effect.acquireRelease(
        Effect.sync(() => FsSync.renameSync(base, `${base}.away`)),
        () => Effect.sync(() => FsSync.renameSync(`${base}.away`, base))
      )
      const failed = yield* Effect.flip(driver.start(id))
      const said = `svc-start: open ${base}: No such file or directory`
      assert.include(String(failed), said)
      assert.include(FsSync.readFileSync(NodePath.join(dataDir, "sandboxes", id, "bwrap.log"), "utf8"), said)
    }))

  it.effect("what /proc shows inside names neither the state folder nor the host id: mountinfo, pid 1's descriptors, cgroups", () =>
    Effect.gen(function*() {
      const { driver, dataDir, hostId } = yield* TestDriver
      const id = uniqueId("masked")
      yield* withSandbox(driver, spec(id))
      const seen = yield* driver.exec(
        id,
        sh(
          "cat /proc/self/mountinfo /proc/1/mountinfo /proc/self/mounts /proc/self/cgroup /proc/1/cgroup; " +
            "tr '\\0' ' ' < /proc/1/cmdline; ls -l /proc/1/fd /proc/1/exe /proc/1/cwd 2>&1; cat /proc/1/environ 2>&1"
        )
      )
      const out = text(seen.stdout)
      // Before: the overlay's options named the data dir and the sandbox's folder
      // (lowerdir=<data>/templates/base,upperdir=<data>/sandboxes/<id>/...), and pid 1's
      // stdout and stderr were <data>/sandboxes/<id>/bwrap.log.
      assert.match(out, /overlay rw,.*lowerdir=\/proc\/self\/fd\/\d+,upperdir=\/proc\/self\/fd\/\d+,workdir=/)
      assert.notInclude(out, dataDir)
      assert.notInclude(out, hostId)
      assert.notInclude(out, "bwrap.log")
      // The exec's own pids group is named without the agent's host pid.
      assert.match(out, /^\d+:pids:\/x\d+-[0-9a-f]{12}$/m)
      assert.notMatch(out, new RegExp(`pids:/x${process.pid}-`))
      assert.match(out, /\/proc\/1\/fd\/0: cannot read link: Permission denied|Permission denied/)
    }))

  it.effect("host settings cannot be written: core_pattern written back with its own value, pid_max, /proc/sys/net", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("sysctl")
      yield* withSandbox(driver, spec(id))
      const before = FsSync.readFileSync("/proc/sys/kernel/core_pattern", "utf8")
      for (
        const file of [
          "kernel/core_pattern",
          "kernel/pid_max",
          "vm/overcommit_memory",
          "kernel/randomize_va_space",
          "net/ipv4/ip_forward"
        ]
      ) {
        const attempt = yield* driver.exec(
          id,
          sh(`cat /proc/sys/${file} > /tmp/value && cat /tmp/value > /proc/sys/${file}`)
        )
        assert.notStrictEqual(attempt.exitCode, 0, file)
        assert.match(text(attempt.stderr), /Read-only file system|Permission denied/, file)
      }
      assert.strictEqual(FsSync.readFileSync("/proc/sys/kernel/core_pattern", "utf8"), before)
      // The rest of /proc that reaches the host: the magic SysRq key, kernel memory, module loading.
      for (
        const probe of [
          "echo h > /proc/sysrq-trigger",
          "head -c 1 /proc/kcore",
          "echo 1 > /proc/sys/kernel/modules_disabled",
          "cat /proc/kmsg"
        ]
      ) {
        const attempt = yield* driver.exec(id, sh(probe))
        assert.notStrictEqual(attempt.exitCode, 0, probe)
      }
      // Nor by remounting: no mount calls at all.
      const remount = yield* driver.exec(id, sh("mount -o remount,rw /proc/sys || mount -t proc proc /mnt"))
      assert.notStrictEqual(remount.exitCode, 0)
    }))

  it.effect("seccomp is in force (mode 2) with no_new_privs, and the calls it blocks fail with EPERM", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("seccomp")
      yield* withSandbox(driver, spec(id))
      const status = text(
        (yield* driver.exec(id, sh("grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status /proc/1/status"))).stdout
      )
      // The exec and the sandbox's init alike.
      assert.match(status, /\/proc\/self\/status:Seccomp:\s+2/)
      assert.match(status, /\/proc\/self\/status:NoNewPrivs:\s+1/)
      assert.match(status, /\/proc\/1\/status:Seccomp:\s+2/)
      for (
        const probe of [
          "unshare -U -r true",
          "unshare -m true",
          "nsenter -t 1 -m true",
          "mount -t tmpfs t /mnt",
          "chroot / true && unshare -n true"
        ]
      ) {
        const result = yield* driver.exec(id, sh(probe))
        assert.notStrictEqual(result.exitCode, 0, probe)
        assert.match(text(result.stderr), /Operation not permitted|permission denied/i, probe)
      }
      // Ordinary software still works: processes, pipes, files, sockets on its own loopback.
      const ordinary = yield* driver.exec(
        id,
        sh(
          "echo hi | tr h H > /tmp/x && cat /tmp/x && (nc -l -p 8080 -e echo served &) && sleep 0.2 && nc 127.0.0.1 8080"
        )
      )
      assert.strictEqual(text(ordinary.stdout), "Hi\nserved\n", text(ordinary.stderr))
    }))

  it.effect("AF_VSOCK, and the calls Docker's profile refuses, are refused inside; unknown calls answer ENOSYS", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("vsock")
      yield* withSandbox(driver, spec(id))
      yield* driver.writeFile(id, "/root/probe", yield* staticProbe("seccomp-probe"), 0o755)
      const result = yield* driver.exec(id, exec(["/root/probe"]))
      const out = text(result.stdout)
      assert.strictEqual(result.exitCode, 0, `${out} ${text(result.stderr)}`)
      const outcome = (name: string) => new RegExp(`^${name} (\\S+)$`, "m").exec(out)?.[1]
      // The hypervisor's vsock is out of reach (before: a stream socket was made).
      assert.strictEqual(outcome("vsock-stream"), "EAFNOSUPPORT", out)
      assert.strictEqual(outcome("vsock-dgram"), "EAFNOSUPPORT", out)
      for (
        const call of ["sethostname", "migrate_pages", "process_madvise", "statmount", "listmount", "open_tree_attr"]
      ) {
        assert.strictEqual(outcome(call), "EPERM", `${call}: ${out}`)
      }
      assert.strictEqual(outcome("unknown-500"), "ENOSYS", out)
      // Ordinary sockets and calls still work.
      assert.strictEqual(outcome("inet"), "ok", out)
      assert.strictEqual(outcome("unix"), "ok", out)
      assert.strictEqual(outcome("getpid"), "ok", out)
    }))

  it.effect("root inside keeps only the sandbox capability set", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("caps")
      yield* withSandbox(driver, spec(id))
      const status = text((yield* driver.exec(id, sh("grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status"))).stdout)
      for (const line of status.trim().split("\n")) assert.strictEqual(line.split(/\s+/)[1], capabilityHex(), line)
      const init = text((yield* driver.exec(id, sh("grep -E '^CapBnd:' /proc/1/status"))).stdout)
      assert.strictEqual(init.trim().split(/\s+/)[1], capabilityHex())
      // What the set allows: owners, modes, low ports.
      const allowed = yield* driver.exec(
        id,
        sh("touch /tmp/f && chown 1000:1000 /tmp/f && chmod 600 /tmp/f && (nc -l -p 80 &) && sleep 0.1 && echo ok")
      )
      assert.strictEqual(text(allowed.stdout), "ok\n", text(allowed.stderr))
      // What it does not: the network's configuration, raw sockets, the hostname.
      for (
        const probe of [
          "ip link set lo down",
          "ip addr add 10.213.255.250/16 dev eth0",
          "hostname evil",
          "ping -c 1 127.0.0.1"
        ]
      ) {
        const result = yield* driver.exec(id, sh(probe))
        assert.notStrictEqual(result.exitCode, 0, probe)
      }
    }))

  it.effect("the file API cannot change a host device: chmod of /dev/null through PUT stays inside", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("devnull")
      yield* withSandbox(driver, spec(id))
      const before = FsSync.statSync("/dev/null")
      const written = yield* Effect.exit(driver.writeFile(id, "/dev/null", new TextEncoder().encode("x"), 0o600))
      const after = FsSync.statSync("/dev/null")
      assert.strictEqual(after.mode, before.mode)
      assert.strictEqual(after.uid, before.uid)
      if (Exit.isFailure(written)) assert.include(String(written.cause), "SandboxFileError")
      const chmod = yield* driver.exec(id, exec(["chmod", "644", "/dev/null"]))
      assert.notStrictEqual(chmod.exitCode, 0)
      assert.strictEqual(FsSync.statSync("/dev/null").mode, before.mode)
    }))

  it.effect("an env value never shows on a host command line or in a host process's environment", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("canary")
      const specCanary = `spec-canary-${randomBytes(8).toString("hex")}`
      const execCanary = `exec-canary-${randomBytes(8).toString("hex")}`
      const info = yield* withSandbox(driver, spec(id, { env: { SPEC_SECRET: specCanary } }))
      const running = yield* Effect.forkChild(
        driver.exec(id, sh("echo $SPEC_SECRET $EXEC_SECRET; sleep 2", { env: { EXEC_SECRET: execCanary } }))
      )
      yield* Effect.sleep("500 millis")
      const namespace = pidNamespace(info.pid!)
      let seen = 0
      for (const pid of hostPids()) {
        const cmdline = readOr(`/proc/${pid}/cmdline`)
        assert.isFalse(cmdline.includes(specCanary) || cmdline.includes(execCanary), `pid ${pid} cmdline: ${cmdline}`)
        // Only the sandbox's own processes hold it, in their environment: none outside its namespace.
        if (pidNamespace(pid) === namespace) continue
        seen++
        const environ = readOr(`/proc/${pid}/environ`)
        assert.isFalse(environ.includes(specCanary) || environ.includes(execCanary), `pid ${pid} environ`)
      }
      assert.isAbove(seen, 10)
      // `ps` as another user would run it shows nothing either.
      const ps = execFileSync("ps", ["auxww"], { encoding: "utf8" })
      assert.notInclude(ps, specCanary)
      assert.notInclude(ps, execCanary)
      const result = yield* Fiber.join(running)
      assert.strictEqual(text(result.stdout), `${specCanary} ${execCanary}\n`)
    }))

  it.effect("entering checks the init it was given: a pid whose start time differs is refused (no reuse window)", () =>
    Effect.gen(function*() {
      const { driver, dataDir } = yield* TestDriver
      const id = uniqueId("reuse")
      const info = yield* withSandbox(driver, spec(id))
      const hostDir = NodePath.join(dataDir, "host")
      const enter = FsSync.readdirSync(hostDir).find((name) => /^svc-enter-[0-9a-f]+$/.test(name))!
      const seccomp = FsSync.readdirSync(hostDir).find((name) => name.endsWith(".bpf"))!
      const stat = FsSync.readFileSync(`/proc/${info.pid}/stat`, "utf8")
      const ticks = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19])
      const emptyEnv = FsSync.openSync("/dev/null", "r")
      const run = (startTicks: number) =>
        spawnSync(NodePath.join(hostDir, enter), [
          "--pid",
          String(info.pid),
          "--start-ticks",
          String(startTicks),
          "--caps",
          capabilityHex(),
          "--seccomp",
          NodePath.join(hostDir, seccomp),
          "--env-fd",
          "3",
          "--cwd",
          "/",
          "--",
          "hostname"
        ], { stdio: ["ignore", "pipe", "pipe", emptyEnv], encoding: "utf8", timeout: 10_000 })
      const right = run(ticks)
      assert.strictEqual(right.stdout, `${id}\n`, right.stderr)
      const wrong = run(ticks + 1)
      assert.strictEqual(wrong.status, 124)
      assert.include(wrong.stderr, "sandbox not running")
      assert.strictEqual(wrong.stdout, "")
      FsSync.closeSync(emptyEnv)
    }))

  it.effect("a data dir inside a private (0700) folder, like root's home, works and stays private", () =>
    Effect.gen(function*() {
      const home = yield* Effect.acquireRelease(
        Effect.promise(() => Fs.mkdtemp("/tmp/svc-private-home-")),
        (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
      )
      assert.strictEqual(FsSync.statSync(home).mode & 0o777, 0o700)
      const dataDir = NodePath.join(home, "data")
      FsSync.mkdirSync(dataDir, { mode: 0o700 })
      const { driver } = yield* makeTestDriver({ dataDir })
      const id = uniqueId("home")
      yield* withSandbox(driver, spec(id))
      const result = yield* driver.exec(id, exec(["hostname"]))
      assert.strictEqual(text(result.stdout), `${id}\n`)
      // Nothing was opened up on the way: the home, the data dir and the sandbox's folder stay 0700.
      assert.strictEqual(FsSync.statSync(home).mode & 0o777, 0o700)
      assert.strictEqual(FsSync.statSync(dataDir).mode & 0o777, 0o700)
      assert.strictEqual(FsSync.statSync(NodePath.join(dataDir, "sandboxes", id)).mode & 0o777, 0o700)
    }))
})
