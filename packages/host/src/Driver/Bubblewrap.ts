/**
 * The namespaces driver: each sandbox is a bubblewrap process tree with its own user, pid,
 * mount, uts, ipc and net namespaces over a copy-on-write root file system, limited by cgroups
 * (v1 or v2) and attached to a host bridge through a veth pair. Sandboxes are detached from the
 * agent (own session, no die-with-parent): a restarted agent finds them again via `list`.
 *
 * This module composes the service from its parts, which share one `DriverHost` (`Host.ts`):
 * `Run.ts` (a run: start and end of the process tree), `Lifecycle.ts` (create, start, stop,
 * destroy, list), `Ended.ts` (a run that ended on its own, and why), `Adopt.ts` (a warm pool
 * entry becomes a sandbox), `Exec.ts`, `Files.ts`, `Processes.ts` (streamed exec, background
 * processes) and `Pty.ts` (terminals).
 */
import { SecretBox } from "@svc/crypto/SecretBox"
import { Effect, Layer } from "effect"
import { SandboxDriver, SandboxStats } from "../Driver.ts"
import { makeAdopt } from "./Adopt.ts"
import { makeArchives } from "./Archives.ts"
import { DriverConfig } from "./Config.ts"
import * as Disk from "./Disk.ts"
import { makeEnded } from "./Ended.ts"
import { makeExec } from "./Exec.ts"
import { makeFiles } from "./Files.ts"
import { makeForks } from "./Forks.ts"
import { invalid, makeDriverHost, tryHost } from "./Host.ts"
import { makeImages } from "./Images.ts"
import { makeLifecycle } from "./Lifecycle.ts"
import * as Network from "./Network.ts"
import { makeProcesses } from "./Processes.ts"
import { makePty } from "./Pty.ts"
import { makeRuns } from "./Run.ts"
import { sandboxPaths } from "./State.ts"
import { makeWatches } from "./Watches.ts"

export class BubblewrapDriver {
  /**
   * The namespaces driver. Needs `DriverConfig` and `SecretBox` (the env in `sandbox.json` is
   * sealed); builds the base template and the bridge at start.
   */
  static readonly layer = Layer.effect(
    SandboxDriver,
    Effect.gen(function*() {
      const host = yield* makeDriverHost(yield* DriverConfig, yield* SecretBox)
      const runs = makeRuns(host)
      const lifecycle = makeLifecycle(host, runs)
      const { ended } = makeEnded(host, runs)
      const hostLimits = { ...(yield* tryHost("init", () => host.cgroups.probe())), disk: Disk.hostStatus(host.disk) }
      const { adopt } = makeAdopt(host, lifecycle)
      const { exec, runInside, spawnInside } = makeExec(host)
      const files = makeFiles(host, { runInside, spawnInside })
      const archives = makeArchives(host, { runInside, spawnInside })
      const watches = makeWatches(host, { spawnInside })

      const stats = Effect.fn("SandboxDriver.stats")(function*(sandboxId: string) {
        const entry = yield* host.lookupRunning(sandboxId)
        const read = yield* tryHost("stats", () => host.cgroups.usage(entry.record.sandboxId))
        const link = yield* tryHost("stats", () => Network.linkBytes(entry.record.internalIp))
        const disk = yield* tryHost("stats", () => Disk.allocatedBytes(sandboxPaths(host.config.dataDir, sandboxId)))
        return new SandboxStats({
          memoryBytes: read.memoryBytes ?? 0,
          ...(read.cpuUsageNs !== undefined ? { cpuUsageNs: read.cpuUsageNs } : {}),
          pids: read.pids ?? 0,
          // The host side's receive is the sandbox's send.
          ...(link !== undefined ? { netBytesOut: link.rx, netBytesIn: link.tx } : {}),
          memoryLimitBytes: entry.record.ramMb * 1024 * 1024,
          diskLimitBytes: entry.record.diskGb * 1024 * 1024 * 1024,
          ...(disk !== undefined ? { diskBytes: disk } : {})
        })
      })

      const portAddress = Effect.fn("SandboxDriver.portAddress")(function*(sandboxId: string, port: number) {
        const entry = yield* host.lookupRunning(sandboxId)
        if (!entry.record.exposedPorts.includes(port)) {
          return yield* invalid(`port ${port} is not one of the sandbox's exposed ports`)
        }
        return { host: entry.record.internalIp, port }
      })

      const processes = makeProcesses(host)
      const pty = makePty(host, processes)
      // The agent stopping ends the background processes it started (their pipes end here).
      yield* Effect.addFinalizer(() => processes.shutdown)

      const images = makeImages(host)
      const forks = makeForks(host)

      const volumeDevices = Effect.fn("SandboxDriver.volumeDevices")(function*(sandboxId: string) {
        const entry = yield* host.lookupRunning(sandboxId)
        return yield* host.volumes.devices(entry.record.volumes ?? [])
      })

      const removeVolume = Effect.fn("SandboxDriver.removeVolume")(
        function*(volumeId: string, type: "local" | "shared") {
          if (!/^vol_[0-9a-z]{26}$/.test(volumeId) || (type !== "local" && type !== "shared")) {
            return yield* invalid("removeVolume: a volume id (vol_...) and its type")
          }
          yield* host.volumes.remove(volumeId, type)
        }
      )

      // A lifecycle step cut in half would leave processes, devices or leases behind: once begun,
      // it runs to its end even if the caller is interrupted.
      return SandboxDriver.of({
        create: (spec) => Effect.uninterruptible(lifecycle.create(spec)),
        adopt: (fromId, spec) => Effect.uninterruptible(adopt(fromId, spec)),
        start: (sandboxId) => Effect.uninterruptible(lifecycle.start(sandboxId)),
        // Background processes of the sandbox end with it, and say so.
        stop: (sandboxId) => Effect.uninterruptible(processes.aroundStop(sandboxId, lifecycle.stop(sandboxId), false)),
        destroy: (sandboxId) =>
          Effect.uninterruptible(processes.aroundStop(sandboxId, lifecycle.destroy(sandboxId), true)),
        exec,
        readFile: files.readFile,
        writeFile: files.writeFile,
        readFileStream: files.readFileStream,
        writeFileStream: files.writeFileStream,
        listDir: files.listDir,
        stat: files.stat,
        fileInfo: files.fileInfo,
        makeDir: files.makeDir,
        move: files.move,
        remove: files.remove,
        readArchive: archives.readArchive,
        writeArchive: archives.writeArchive,
        watch: watches.watch,
        stats,
        portAddress,
        list: lifecycle.list,
        pty,
        execStream: processes.execStream,
        startProcess: processes.startProcess,
        processes: processes.processes,
        process: processes.process,
        processOutput: processes.processOutput,
        processStdin: processes.processStdin,
        signalProcess: processes.signalProcess,
        ended: (sandboxId) => Effect.uninterruptible(ended(sandboxId)),
        ...images,
        snapshotLayer: (sandboxId, digest) => Effect.uninterruptible(forks.snapshotLayer(sandboxId, digest)),
        sweepForkLayers: (graceMs) => Effect.uninterruptible(forks.sweepForkLayers(graceMs)),
        volumeDevices,
        removeVolume: (volumeId, type) => Effect.uninterruptible(removeVolume(volumeId, type)),
        hostLimits
      })
    })
  )
}

export { DriverConfig }
