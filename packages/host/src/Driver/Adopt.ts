/**
 * `adopt`: a running sandbox made ahead of need (a host agent's warm pool entry) becomes the
 * sandbox a create asked for: no bubblewrap start and no veth on the create's path, only
 * renames, cgroup writes, a hostname and /dev/shm's size (the spawner's; no program started).
 */
import { Effect } from "effect"
import * as FsSync from "node:fs"
import { DriverFailure, SandboxAlreadyExists, SandboxSpec } from "../Driver.ts"
import * as Disk from "./Disk.ts"
import { checkId, decodeInput, type DriverHost, invalid, spawnerTask, tryHost } from "./Host.ts"
import type { DriverLifecycle } from "./Lifecycle.ts"
import * as Network from "./Network.ts"
import { infoOf } from "./Run.ts"
import * as Spawner from "./Spawner.ts"
import { RunRecord, sandboxPaths, SandboxRecord, writeRunRecord, writeSandboxRecord } from "./State.ts"

export const makeAdopt = (host: DriverHost, lifecycle: Pick<DriverLifecycle, "destroyInternal">) => {
  const { config, cgroups } = host

  /**
   * Renames a running sandbox and applies the spec's settings. The order keeps a crash at any
   * point recoverable by `destroy` of one of the two ids: the folder is renamed first (from
   * then on the sandbox is `spec.sandboxId`; `destroy` handles a record still naming `fromId`),
   * then its cgroups (renamed on v1, moved to a new group on v2), the record, the lease, the hostname.
   */
  const adopt = Effect.fn("SandboxDriver.adopt")(function*(fromId: string, input: SandboxSpec) {
    const from = yield* checkId(fromId)
    const spec = yield* decodeInput(SandboxSpec, input)
    if (from === spec.sandboxId) return yield* invalid("adopt: the new id must differ from the old one")
    // Volumes are mounted as a sandbox starts: a running pool entry cannot take them.
    if ((spec.volumes ?? []).length > 0) {
      return yield* invalid("adopt: a sandbox with volumes cannot adopt a running one")
    }
    return yield* host.withLock(
      from,
      host.withLock(
        spec.sandboxId,
        Effect.gen(function*() {
          const target = sandboxPaths(config.dataDir, spec.sandboxId)
          if (FsSync.lstatSync(target.dir, { throwIfNoEntry: false }) !== undefined) {
            return yield* new SandboxAlreadyExists({ sandboxId: spec.sandboxId })
          }
          const entry = yield* host.lookupRunning(from)
          if (entry.record.template !== spec.template) {
            return yield* invalid(
              `adopt: ${from} was made from template ${entry.record.template}, not ${spec.template}`
            )
          }
          // Its disk image is mounted: growing it would need an online resize (CAP_SYS_RESOURCE, which
          // some hosts withhold even from root), so only an equal size is adopted.
          if (entry.record.diskGb !== spec.diskGb) {
            return yield* invalid(`adopt: ${from} has a disk of ${entry.record.diskGb} GiB, not ${spec.diskGb}`)
          }
          const source = sandboxPaths(config.dataDir, from)
          host.running.delete(from)
          // Renames within one folder: metadata only, made synchronously (no thread-pool hop).
          yield* tryHost("adopt", async () => FsSync.renameSync(source.dir, target.dir))
          // The mount point's folder follows (its mount lives in the sandbox's namespace only).
          try {
            FsSync.renameSync(host.mountPoint(from), host.mountPoint(spec.sandboxId))
          } catch {
            // Not there (never made, or removed): bubblewrap's next start makes it.
          }
          return yield* Effect.gen(function*() {
            yield* tryHost("adopt", () => cgroups.rename(from, spec.sandboxId))
            const record = new SandboxRecord({
              ...entry.record,
              sandboxId: spec.sandboxId,
              env: spec.env,
              cpu: spec.cpu,
              ramMb: spec.ramMb,
              diskGb: spec.diskGb,
              exposedPorts: spec.exposedPorts,
              createdAt: new Date().toISOString()
            })
            // The hostname, and /dev/shm sized for the new memory limit: done by a child of the
            // spawner in the init's UTS and mount namespaces and root (host root may join them),
            // no program started there, nothing of the sandbox's run or trusted. Asked first and
            // awaited beside the record, lease and cgroup steps (this process's work meanwhile):
            // none depends on another, and a failure of either ends the other and undoes all.
            const inside = spawnerTask("adopt", (signal) =>
              Spawner.adoptInside({
                pid: entry.run.pid,
                startTicks: entry.run.startTicks,
                hostname: spec.sandboxId,
                shmBytes: Disk.shmBytes(spec.ramMb)
              }, signal))
            const settle = Effect.gen(function*() {
              yield* writeSandboxRecord(target, record, host.secrets, "adopt")
              const handed = yield* tryHost(
                "adopt",
                () => Network.transfer(config.leaseDir, record.internalIp, host.owner(from), host.owner(spec.sandboxId))
              )
              if (!handed) {
                return yield* new DriverFailure({
                  operation: "adopt",
                  message: `the address ${record.internalIp} was taken meanwhile`
                })
              }
              // Its uid range goes with it: the running processes are that range.
              if (
                record.uidSlot !== undefined && !(yield* tryHost(
                  "adopt",
                  () =>
                    Network.transfer(
                      config.slotDir,
                      String(record.uidSlot),
                      host.owner(from),
                      host.owner(spec.sandboxId)
                    )
                ))
              ) {
                return yield* new DriverFailure({
                  operation: "adopt",
                  message: `the uid range ${record.uidSlot} was taken meanwhile`
                })
              }
              return yield* tryHost("adopt", () =>
                cgroups.prepare(spec.sandboxId, {
                  ramMb: spec.ramMb,
                  cpu: spec.cpu,
                  pidsMax: config.pidsMax,
                  diskGb: spec.diskGb
                }))
            })
            const [, prepared] = yield* Effect.all([inside, settle], { concurrency: 2 })
            const runRecord = new RunRecord({
              ...entry.run,
              limits: { ...prepared.limits, disk: entry.run.limits.disk }
            })
            yield* tryHost("adopt", () => writeRunRecord(target, runRecord))
            host.running.set(spec.sandboxId, { record, run: runRecord })
            return infoOf(record, runRecord)
          }).pipe(Effect.tapError(() => lifecycle.destroyInternal(spec.sandboxId).pipe(Effect.ignore)))
        })
      )
    )
  })

  return { adopt }
}
