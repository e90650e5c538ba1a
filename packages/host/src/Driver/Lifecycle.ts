/**
 * A sandbox's life on this host: `create` (its folder, record, lease, then a run), `start` and
 * `stop` (a run begins or ends; the file system stays), `destroy` (everything goes), and `list`,
 * which reads the disk only, so that a restarted agent finds what an earlier process made.
 */
import { Effect, Schema } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import {
  type DriverFailure,
  DriverSandboxId,
  MAX_LAYERS,
  SandboxAlreadyExists,
  SandboxCapacityExhausted,
  SandboxListing,
  SandboxSpec,
  TemplateNotFound
} from "../Driver.ts"
import * as Layers from "../ImageLayers.ts"
import * as Disk from "./Disk.ts"
import { checkId, decodeInput, type DriverHost, HOST_ENV, invalid, tryHost } from "./Host.ts"
import * as Network from "./Network.ts"
import type { Runs } from "./Run.ts"
import { isAlive, readRunRecord, readStoredRecord, sandboxPaths, SandboxRecord, writeSandboxRecord } from "./State.ts"

export const makeLifecycle = (host: DriverHost, runs: Runs) => {
  const { config, cgroups, subnet } = host
  const { startRun, teardownRun } = runs

  /** Refuses to delete a folder that something still has mounted (it would recurse into it). */
  const assertNothingMounted = (dir: string) =>
    tryHost("destroy", async () => {
      const mounts = await Fs.readFile("/proc/self/mountinfo", "utf8")
      for (const line of mounts.split("\n")) {
        const mountPoint = line.split(" ")[4]
        if (mountPoint !== undefined && (mountPoint === dir || mountPoint.startsWith(dir + "/"))) {
          throw new Error(`${mountPoint} is still mounted`)
        }
      }
    })

  /**
   * `destroy` of an id already checked, run under the caller's lock: also what a failed create or
   * adopt uses to leave nothing behind.
   */
  const destroyInternal = (sandboxId: string) =>
    Effect.gen(function*() {
      host.running.delete(sandboxId)
      const paths = sandboxPaths(config.dataDir, sandboxId)
      // Not opened: tearing down needs only the id and the address (and works without the key).
      const stored = yield* tryHost("destroy", () => readStoredRecord(paths))
      if (stored !== undefined) {
        const { sealedEnv: _, ...fields } = stored
        const record = new SandboxRecord({ ...fields, env: {} })
        const runRecord = yield* tryHost("destroy", () => readRunRecord(paths))
        yield* teardownRun(record, paths, runRecord)
        yield* tryHost("destroy", () => Network.release(config.leaseDir, record.internalIp, host.owner(sandboxId)))
        yield* tryHost("destroy", () => host.releaseSlot(sandboxId, record.uidSlot))
        if (record.sandboxId !== sandboxId) {
          // Half adopted (see `adopt`): the folder has the new name, the record the old one.
          yield* tryHost("destroy", () => cgroups.removeAll(sandboxId))
          yield* tryHost("destroy", () =>
            Network.release(config.leaseDir, record.internalIp, host.owner(record.sandboxId)))
          yield* tryHost("destroy", () =>
            host.releaseSlot(record.sandboxId, record.uidSlot))
        }
      } else {
        yield* tryHost("destroy", () => cgroups.removeAll(sandboxId))
      }
      // The kernel let go of the disk image's loop device with the sandbox's processes; make sure.
      yield* Disk.awaitDetached(paths)
      yield* assertNothingMounted(paths.dir)
      yield* tryHost("destroy", () => Fs.rm(paths.dir, { recursive: true, force: true }))
    })

  const create = Effect.fn("SandboxDriver.create")(function*(input: SandboxSpec) {
    const spec = yield* decodeInput(SandboxSpec, input)
    return yield* host.withLock(
      spec.sandboxId,
      Effect.gen(function*() {
        const paths = sandboxPaths(config.dataDir, spec.sandboxId)
        if ((yield* tryHost("create", () => readStoredRecord(paths))) !== undefined) {
          return yield* new SandboxAlreadyExists({ sandboxId: spec.sandboxId })
        }
        let env = spec.env
        let lower: string
        if (spec.forkOf !== undefined) {
          // A fork (`Forks.ts`): the source's snapshot over the source's own lower folders, its env.
          const forkOf = spec.forkOf
          const source = yield* host.loadRecord(forkOf.sandboxId).pipe(
            Effect.catchTag("SandboxNotFound", () => new TemplateNotFound({ template: `fork of ${forkOf.sandboxId}` }))
          )
          if (!(yield* tryHost("create", () => Layers.hasLayer(config.dataDir, forkOf.layer)))) {
            return yield* new TemplateNotFound({ template: `layer ${forkOf.layer.slice(0, 12)}` })
          }
          const below = source.record.templateDir.split(":")
          if (below.length > MAX_LAYERS) {
            return yield* invalid(
              `create: a fork stacks at most ${MAX_LAYERS} layers; this one would stack ${below.length}`
            )
          }
          lower = [Layers.layerDir(config.dataDir, forkOf.layer), ...below].join(":")
          env = { ...source.record.env, ...spec.env }
        } else {
          const root = yield* host.templateDir(spec.template)
          // The image's layers over its root, top first (overlayfs' order of lower folders).
          const layers = spec.layers ?? []
          for (const digest of layers) {
            if (!(yield* tryHost("create", () => Layers.hasLayer(config.dataDir, digest)))) {
              return yield* new TemplateNotFound({ template: `layer ${digest.slice(0, 12)}` })
            }
          }
          lower = [...layers].reverse().map((digest) => Layers.layerDir(config.dataDir, digest)).concat(root)
            .join(":")
        }
        // A folder without a record is a create that died halfway: start clean. Without a folder
        // there is nothing of the id to clean (cgroups, record and run come after it, and
        // `destroy` removes it last): the teardown's ~30 file calls are skipped.
        if (FsSync.lstatSync(paths.dir, { throwIfNoEntry: false }) !== undefined) {
          yield* destroyInternal(spec.sandboxId)
        }
        const internalIp = yield* tryHost(
          "create",
          () => Network.lease(config.leaseDir, subnet, host.owner(spec.sandboxId))
        )
        if (internalIp === undefined) {
          return yield* new SandboxCapacityExhausted({ message: `no free address in ${config.subnet}` })
        }
        const uidSlot = yield* tryHost("create", () => host.leaseSlot(spec.sandboxId, undefined))
        if (uidSlot === undefined) {
          yield* tryHost("create", () => Network.release(config.leaseDir, internalIp, host.owner(spec.sandboxId)))
          return yield* new SandboxCapacityExhausted({
            message: `no free uid range: all ${config.uidSlots} of this machine are leased`
          })
        }
        const record = new SandboxRecord({
          sandboxId: spec.sandboxId,
          hostId: config.hostId,
          template: spec.template,
          templateDir: lower,
          env,
          cpu: spec.cpu,
          ramMb: spec.ramMb,
          diskGb: spec.diskGb,
          exposedPorts: spec.exposedPorts,
          internalIp,
          uidSlot,
          createdAt: new Date().toISOString(),
          ...(spec.volumes !== undefined && spec.volumes.length > 0 ? { volumes: spec.volumes } : {}),
          ...(spec.workdir !== undefined ? { workdir: spec.workdir } : {}),
          ...(spec.user !== undefined ? { user: spec.user } : {})
        })
        const made = tryHost("create", async () => {
          FsSync.mkdirSync(paths.dir, { recursive: true, mode: 0o700 })
        }).pipe(
          // The writable layer: a disk image of diskGb (or folders where the host has no loop devices).
          Effect.andThen(Disk.makeLayer(host.disk, host.diskStock, paths, spec.diskGb, HOST_ENV)),
          // The record last: a folder without one is a create that died halfway.
          Effect.andThen(writeSandboxRecord(paths, record, host.secrets, "create"))
        )
        return yield* made.pipe(
          Effect.flatMap(() => startRun(record, paths, { fresh: true })),
          Effect.tapError(() => destroyInternal(spec.sandboxId).pipe(Effect.ignore))
        )
      })
    )
  })

  const start = Effect.fn("SandboxDriver.start")(function*(sandboxId: string) {
    const id = yield* checkId(sandboxId)
    return yield* host.withLock(
      id,
      Effect.gen(function*() {
        const { paths, record } = yield* host.loadRecord(id)
        return yield* startRun(record, paths)
      })
    )
  })

  const stop = Effect.fn("SandboxDriver.stop")(function*(sandboxId: string) {
    const id = yield* checkId(sandboxId)
    yield* host.withLock(
      id,
      Effect.gen(function*() {
        host.running.delete(id)
        const { paths, record } = yield* host.loadRecord(id)
        const runRecord = yield* tryHost("stop", () => readRunRecord(paths))
        yield* teardownRun(record, paths, runRecord)
      })
    )
  })

  const destroy = Effect.fn("SandboxDriver.destroy")(function*(sandboxId: string) {
    const id = yield* checkId(sandboxId)
    yield* host.withLock(id, destroyInternal(id))
  })

  const list: Effect.Effect<ReadonlyArray<SandboxListing>, DriverFailure> = Effect.gen(function*() {
    const names = yield* tryHost("list", () => Fs.readdir(host.sandboxesDir).catch(() => [] as Array<string>))
    const rows: Array<SandboxListing> = []
    for (const name of names) {
      if (!Schema.is(DriverSandboxId)(name)) continue
      const paths = sandboxPaths(config.dataDir, name)
      const record = yield* tryHost("list", () => readStoredRecord(paths))
      if (record === undefined) continue
      const runRecord = yield* tryHost("list", () => readRunRecord(paths))
      const alive = runRecord !== undefined && (yield* tryHost("list", () => isAlive(runRecord)))
      rows.push(
        new SandboxListing({
          sandboxId: record.sandboxId,
          status: alive ? "running" : "stopped",
          internalIp: record.internalIp,
          ...(alive ? { pid: runRecord!.pid, startedAt: runRecord!.startedAt } : {}),
          createdAt: record.createdAt,
          template: record.template
        })
      )
    }
    return rows
  }).pipe(Effect.withSpan("SandboxDriver.list"))

  return { create, start, stop, destroy, destroyInternal, list }
}

export type DriverLifecycle = ReturnType<typeof makeLifecycle>
