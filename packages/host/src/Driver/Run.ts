/**
 * A run of a sandbox (what `run.json` records): its process tree started over the saved file
 * system, joined to its cgroups and given its veth; and the end of a run, which removes all of
 * that and keeps the file system. `create` and `start` both begin a run, `stop` and `destroy`
 * end one.
 */
import { Effect } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import { DriverFailure, SandboxInfo } from "../Driver.ts"
import { shiftOwnership } from "../Rootfs.ts"
import * as Confinement from "./Confinement.ts"
import * as Disk from "./Disk.ts"
import {
  type DriverHost,
  errorMessage,
  HELPER_DIR,
  HOST_ENV,
  INIT,
  SANDBOX_PATH,
  spawnerTask,
  tryHost
} from "./Host.ts"
import * as Network from "./Network.ts"
import * as Spawner from "./Spawner.ts"
import {
  isAlive,
  isInitAlive,
  procStat,
  readRunRecord,
  RunRecord,
  type SandboxPaths,
  SandboxRecord,
  writeRunRecord,
  writeSandboxRecord
} from "./State.ts"

/**
 * What the agent keeps of a start's output (svc-start's and bubblewrap's, on one pipe): the
 * last 16 KiB, for the failure message and `bwrap.log`. Nothing of a sandbox is ever a host
 * file open for writing: once the sandbox is ready the agent closes the pipe, and a later write
 * by bubblewrap (or by anything inside made to write there) fails with EPIPE.
 */
const START_OUTPUT_BYTES = 16 * 1024

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** What create, start and adopt answer. */
export const infoOf = (record: SandboxRecord, runRecord: RunRecord) =>
  new SandboxInfo({
    sandboxId: record.sandboxId,
    pid: runRecord.pid,
    internalIp: record.internalIp,
    startedAt: runRecord.startedAt,
    limits: runRecord.limits
  })

export interface Runs {
  /**
   * Starts a sandbox from its saved file system; a running one is left as it is. `fresh`: its
   * folder was made just now by a create (after the clean-up of anything of its id), so there
   * is no earlier run to look for or clear.
   */
  startRun(
    record: SandboxRecord,
    paths: SandboxPaths,
    options?: { readonly fresh: boolean }
  ): Effect.Effect<SandboxInfo, DriverFailure>
  /** Ends every process of a run and removes what belongs to it; the file system stays. */
  teardownRun(
    record: SandboxRecord,
    paths: SandboxPaths,
    runRecord: RunRecord | undefined
  ): Effect.Effect<void, DriverFailure>
}

export const makeRuns = (host: DriverHost): Runs => {
  const { config, bin, cgroups, subnet } = host

  /**
   * Starts bubblewrap detached and waits for the init's readiness byte. Yields pid 1 of the
   * sandbox and the host-side bubblewrap (the monitor: it waits for pid 1 and writes the init's
   * exit status to `status.json` when it ends).
   */
  const spawnSandbox = (
    record: SandboxRecord,
    paths: SandboxPaths,
    procsFiles: ReadonlyArray<string>,
    disk: Disk.Layout,
    uid: number
  ) =>
    Effect.callback<{ readonly pid: number; readonly monitorPid: number | undefined }, DriverFailure>((resume) => {
      // The init needs no user variables: execs get them (so they never sit in pid 1's cmdline).
      const env: Record<string, string> = { PATH: SANDBOX_PATH, HOME: "/root", HOSTNAME: record.sandboxId }
      const mountPoint = host.mountPoint(record.sandboxId)
      try {
        FsSync.mkdirSync(mountPoint, { recursive: true, mode: 0o755 })
      } catch (e) {
        resume(Effect.fail(new DriverFailure({ operation: "start", message: errorMessage(e) })))
        return
      }
      const bwrapArgs = [
        "--bind",
        mountPoint,
        "/",
        "--proc",
        "/proc",
        // Host-global and network settings: readable, never writable from inside.
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        "--dev",
        "/dev",
        // tmpfs is memory: /dev/shm is bounded below the memory limit, /dev itself is read-only.
        "--perms",
        "01777",
        "--size",
        String(Disk.shmBytes(record.ramMb)),
        "--tmpfs",
        "/dev/shm",
        "--ro-bind",
        host.helperDir,
        HELPER_DIR,
        "--remount-ro",
        "/dev",
        // uid 0 inside is the sandbox's own range (`uid`) on the host: the agent writes the map
        // while bwrap waits on fd 7.
        "--unshare-user",
        "--uid",
        "0",
        "--gid",
        "0",
        "--userns-block-fd",
        "7",
        "--unshare-pid",
        // pid 1 is svc-init (not dumpable: root inside cannot ptrace it), not bubblewrap's reaper,
        // which makes itself dumpable.
        "--as-pid-1",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
        "--unshare-cgroup-try",
        "--hostname",
        record.sandboxId,
        "--cap-drop",
        "ALL",
        ...Confinement.CAPABILITIES.flatMap(([name]) => ["--cap-add", name]),
        "--seccomp",
        "6",
        "--new-session",
        "--clearenv",
        ...Object.entries(env).flatMap(([k, v]) => ["--setenv", k, v]),
        "--chdir",
        "/",
        "--info-fd",
        "3",
        // fd 6 is the seccomp filter, 7 the user namespace's go-ahead.
        "--json-status-fd",
        "8"
      ]
      // svc-start (native/svc-start.c), as host root: a private mount namespace, the cgroups, the
      // disk image and the overlay (seen by this sandbox only, its layers idmapped from the files'
      // range to the sandbox's), the filter on fd 6, then it execs bubblewrap as the sandbox's
      // unprivileged uid: nothing of the sandbox runs as host root,
      // and the agent maps its user namespace (below). bubblewrap, unprivileged, must be able to
      // walk to the root's mount point: the sandbox's folder is 0711. Started by the spawner (no
      // fork of the agent), and it outlives it: the sandbox must outlive its agent.
      let child: Spawner.Spawned | undefined
      let output = Buffer.alloc(0)
      let info = ""
      let pid: number | undefined
      let ready = false
      let done = false
      const finish = (
        result: Effect.Effect<{ readonly pid: number; readonly monitorPid: number | undefined }, DriverFailure>
      ) => {
        if (done) return
        done = true
        clearTimeout(timer)
        for (const i of [1, 3, 4, 7]) child?.stdio[i]?.destroy()
        // Written by the agent, once, from what it kept: never a file the sandbox holds open.
        try {
          FsSync.writeFileSync(paths.log, output, { mode: 0o600 })
        } catch {
          // Diagnostics only.
        }
        // The sandbox outlives this process: do not keep the event loop for it.
        child?.unref()
        resume(result)
      }
      const fail = (why: string) => {
        // Once started, the monitor's later end (or the spawner's) is the sandbox's business, not this start's.
        if (done) return
        const log = output.toString("utf8").slice(-2000)
        if (pid !== undefined) {
          try {
            process.kill(pid, "SIGKILL")
          } catch {
            // Gone.
          }
        }
        child?.killGroup("SIGKILL")
        finish(Effect.fail(new DriverFailure({ operation: "start", message: `${why}: ${log.trim()}` })))
      }
      const timer = setTimeout(() => fail("the sandbox did not become ready within 20 s"), 20_000)
      Spawner.spawn(
        host.confinement.start,
        [
          ...procsFiles.flatMap((file) => ["--cgroup", file]),
          ...Disk.startArgs(host.disk, disk),
          "--lower",
          record.templateDir,
          "--upper",
          disk.upper,
          "--work",
          disk.work,
          "--root",
          mountPoint,
          "--seccomp",
          host.confinement.seccomp,
          "--uid",
          String(uid),
          "--file-uid",
          String(config.uidBase),
          "--nofile",
          String(config.nofile),
          // The volumes, bound into the root before bubblewrap binds it (`Volumes.ts`).
          ...host.volumes.startArgs(record.volumes ?? []),
          // bwrap reads its options from fd 5: host paths stay out of pid 1's cmdline inside.
          "--",
          bin.bwrap,
          "--args",
          "5",
          // The sandbox's pid 1 (no reaper of bubblewrap's: `--as-pid-1` in its options).
          INIT
        ],
        {
          env: HOST_ENV,
          outlive: true,
          stdio: [
            "ignore",
            "out", // 1 and 2: the start's output (START_OUTPUT_BYTES kept)
            { sameAs: 1 },
            "out", // 3: bubblewrap's info (the child's pid)
            "out", // 4: the init's "ready"
            { data: Buffer.from(bwrapArgs.map((arg) => arg + "\0").join("")) }, // 5: bubblewrap's options
            "ignore", // 6: svc-start opens the filter there
            "in", // 7: the user namespace's go-ahead
            // 8: a fresh file per run: an exit status in it is this run's.
            { truncate: paths.status }
          ]
        }
      ).then((spawned) => {
        child = spawned
        if (done) return spawned.killGroup("SIGKILL")
        const outputPipe = spawned.stdio[1]!
        let outputEnded = false
        outputPipe.on("data", (chunk: Buffer) => {
          output = Buffer.concat([output, chunk])
          if (output.length > START_OUTPUT_BYTES) output = output.subarray(output.length - START_OUTPUT_BYTES)
        })
        outputPipe.on("error", () => undefined)
        outputPipe.on("close", () => {
          outputEnded = true
        })
        const infoPipe = spawned.stdio[3]!
        const readyPipe = spawned.stdio[4]!
        const userNsPipe = spawned.stdio[7]!
        userNsPipe.on("error", () => undefined)
        const check = () => {
          // svc-start execs: the spawned process is the host-side bubblewrap.
          if (ready && pid !== undefined) finish(Effect.succeed({ pid, monitorPid: spawned.pid }))
        }
        infoPipe.on("data", (chunk: Buffer) => {
          info += chunk.toString("utf8")
          const match = /"child-pid":\s*(\d+)/.exec(info)
          if (match && pid === undefined) {
            pid = Number(match[1])
            // The sandbox's user namespace exists and waits: map its ids, then let it go on.
            try {
              const map = Confinement.uidMap(uid)
              FsSync.writeFileSync(`/proc/${pid}/uid_map`, map)
              FsSync.writeFileSync(`/proc/${pid}/gid_map`, map)
            } catch (e) {
              fail(`mapping the sandbox's user namespace: ${errorMessage(e)}`)
              return
            }
            userNsPipe.write("1")
            check()
          }
        })
        readyPipe.on("data", () => {
          ready = true
          check()
        })
        spawned.on("error", (e) => fail(e.message))
        spawned.on("exit", (code, signal) => {
          if (done) return
          const why = `bubblewrap exited (${code ?? signal}) before the sandbox was ready`
          // Its last words may still be in the pipe: read them first (briefly: a process left
          // inside may hold the pipe open).
          if (outputEnded) return fail(why)
          const late = setTimeout(() => fail(why), 500)
          outputPipe.once("close", () => {
            clearTimeout(late)
            fail(why)
          })
        })
      }, (e) => fail(`svc-start could not be started: ${errorMessage(e)}`))
    })

  /** Makes the veth pair and configures the sandbox end. */
  const attachNetwork = (runRecord: RunRecord, internalIp: string) =>
    Effect.gen(function*() {
      const { host: veth } = Network.vethNames(internalIp)
      if (yield* tryHost("network", () => Network.interfaceExists(veth))) {
        yield* spawnerTask("network", (signal) => Spawner.unlink(veth, signal), 10_000)
      }
      // rtnetlink requests made by the spawner (no `ip`, no fork of the agent): the host's end,
      // then the sandbox's from inside its net namespace, which a child of the spawner joins.
      yield* spawnerTask("network", (signal) =>
        Spawner.veth({
          pid: runRecord.pid,
          startTicks: runRecord.startTicks,
          bridge: config.bridge,
          hostEnd: veth,
          mac: Network.macOf(internalIp),
          ip: internalIp,
          prefix: subnet.prefix,
          gateway: config.egress !== undefined ? subnet.gateway : undefined
        }, signal))
    })

  const detachNetwork = (internalIp: string) =>
    Effect.gen(function*() {
      const { host: veth } = Network.vethNames(internalIp)
      if (yield* tryHost("network", () => Network.interfaceExists(veth))) {
        // By the spawner's rtnetlink (no `ip` started); one the kernel removed meanwhile with the
        // namespace is done.
        yield* spawnerTask("network", (signal) => Spawner.unlink(veth, signal), 10_000)
      }
    })

  const teardownRun = (record: SandboxRecord, paths: SandboxPaths, runRecord: RunRecord | undefined) =>
    Effect.gen(function*() {
      if (runRecord !== undefined && (yield* tryHost("stop", () => isInitAlive(runRecord)))) {
        // SIGKILL to pid 1 of the namespace ends every process in it at once.
        yield* tryHost("stop", async () => {
          try {
            process.kill(runRecord.pid, "SIGKILL")
          } catch {
            // Raced with its exit.
          }
          for (let i = 0; i < 500 && (await isInitAlive(runRecord)); i++) await sleep(10)
        })
      }
      yield* tryHost("stop", () => cgroups.removeAll(record.sandboxId))
      yield* detachNetwork(record.internalIp)
      yield* tryHost("stop", async () => {
        await Fs.rm(paths.run, { force: true })
        // Its root was mounted there in its own namespace only, which is gone: an empty folder.
        await Fs.rmdir(host.mountPoint(record.sandboxId)).catch(() => undefined)
        // How an earlier run ended is over once the sandbox is started or stopped again.
        await Fs.rm(paths.ended, { force: true })
      })
    })

  const startRun = (initial: SandboxRecord, paths: SandboxPaths, options?: { readonly fresh: boolean }) =>
    Effect.gen(function*() {
      let record = initial
      if (options?.fresh !== true) {
        const existing = yield* tryHost("start", () => readRunRecord(paths))
        if (existing !== undefined && (yield* tryHost("start", () => isAlive(existing)))) {
          return infoOf(record, existing)
        }
        // Leftovers of a run that ended without stop (crash, reboot): clear them first.
        yield* teardownRun(record, paths, existing)
      }

      // The lease normally persists; after a reboot (/run is empty) take the same address back.
      // (A fresh create took it a moment ago, under the same lock.)
      if (options?.fresh !== true) {
        const leased = yield* tryHost(
          "start",
          () => Network.lease(config.leaseDir, subnet, host.owner(record.sandboxId), record.internalIp)
        )
        if (leased === undefined) {
          return yield* new DriverFailure({ operation: "start", message: "no free internal address" })
        }
        if (leased !== record.internalIp) {
          record = new SandboxRecord({ ...record, internalIp: leased })
          yield* writeSandboxRecord(paths, record, host.secrets, "start")
        }
      }

      // Its own uid range while it runs (a create leased it a moment ago).
      if (options?.fresh !== true || record.uidSlot === undefined) {
        const slot = yield* tryHost("start", () => host.leaseSlot(record.sandboxId, record.uidSlot))
        if (slot === undefined) {
          return yield* new DriverFailure({
            operation: "start",
            message: `no free uid range: all ${config.uidSlots} of this machine are leased`
          })
        }
        if (slot !== record.uidSlot) {
          record = new SandboxRecord({ ...record, uidSlot: slot })
          yield* writeSandboxRecord(paths, record, host.secrets, "start")
        }
      }
      const uid = Confinement.slotUid(config.uidBase, record.uidSlot!)

      const disk = yield* tryHost("start", () => Disk.layoutOf(paths))
      // The writable layer belongs to the sandbox's root (a sandbox made before user namespaces
      // were mapped has a root-owned one: shifted once). A disk image is formatted with it so
      // (`Disk.ts`).
      if (disk.image === undefined) {
        yield* tryHost("start", async () => {
          const st = await Fs.lstat(paths.upper)
          if (st.uid !== config.uidBase) {
            if (st.uid < config.uidBase) await shiftOwnership(paths.upper, config.uidBase)
            else await Fs.lchown(paths.upper, config.uidBase, config.uidBase)
            await Fs.chmod(paths.upper, 0o755)
          }
        })
      }
      // A volume's image is made by the first start that needs it; a shared one is mounted on the machine.
      yield* host.volumes.prepare(record.volumes ?? [])
      const prepared = yield* tryHost("start", () =>
        cgroups.prepare(record.sandboxId, {
          ramMb: record.ramMb,
          cpu: record.cpu,
          pidsMax: config.pidsMax,
          diskGb: record.diskGb
        }))
      const { pid, monitorPid } = yield* spawnSandbox(record, paths, prepared.procsFiles, disk, uid)
      const started = yield* tryHost("start", () => procStat(pid))
      const monitor = monitorPid === undefined ? undefined : yield* tryHost("start", () => procStat(monitorPid))
      const runRecord = new RunRecord({
        pid,
        startTicks: started?.startTicks ?? 0,
        startedAt: new Date().toISOString(),
        limits: { ...prepared.limits, disk: Disk.status(host.disk, disk) },
        // A monitor gone already (the init ended at once) leaves a run that counts as ended.
        ...(monitorPid !== undefined ? { monitorPid, monitorStartTicks: monitor?.startTicks ?? -1 } : {})
      })
      // Written before the network so that a failure below still finds the process to kill.
      yield* tryHost("start", () => writeRunRecord(paths, runRecord))
      yield* attachNetwork(runRecord, record.internalIp).pipe(
        Effect.tapError(() => teardownRun(record, paths, runRecord).pipe(Effect.ignore))
      )
      host.running.set(record.sandboxId, { record, run: runRecord })
      return infoOf(record, runRecord)
    })

  return { startRun, teardownRun }
}
