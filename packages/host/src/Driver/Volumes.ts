/**
 * Volumes on a host (the design: docs/architecture.md#volumes). A volume is an ext4 file system
 * in a sparse image file of its `sizeGb` GiB, made by the first host that mounts it, formatted
 * like a sandbox's disk (`Disk.ts`) with its root folder owned by the sandboxes' root (`uid`):
 * writing past its size fails inside with ENOSPC, and it never takes more of the host's disk.
 *
 * - **local**: the image is `<dataDir>/volumes/<id>.img`, on the one host that holds it (the
 *   control plane places every sandbox using it there). `svc-start` loop-mounts it in the
 *   sandbox's own mount namespace, as it does the disk (autoclear: the device goes with the
 *   sandbox's processes; `flock` on the image: never two ext4 instances over one file), and
 *   binds its `subpath` at the mount path. One sandbox at a time.
 * - **shared**: the image is `<sharedVolumesDir>/<id>.img`, mounted once per machine at
 *   `<sharedVolumesDir>/<id>.mnt` in the host's namespace by the first agent of the machine that
 *   needs it (under `<id>.lock`), and bound by `svc-start` into each sandbox that uses it: one
 *   ext4 instance, any number of sandboxes and agents of the machine, all seeing each other's
 *   writes at once. Across machines the same folder would be a network file system served by
 *   the machine that mounts the image (not built: these machines run one kernel).
 *
 * `svc-start` opens every path component below the volume's root and the sandbox's root without
 * following links (`native/volume-mount.h`), since tenants own both trees.
 */
import type { VolumeMount } from "@svc/host-protocol/Volumes"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { DriverFailure } from "../Driver.ts"
import type { DriverConfig } from "./Config.ts"
import * as Disk from "./Disk.ts"
import * as Native from "./Native.ts"
import { runChecked } from "./Process.ts"

const GIB = 1024 ** 3

const tryHost = <A>(f: () => Promise<A>): Effect.Effect<A, DriverFailure> =>
  Effect.tryPromise({
    try: f,
    catch: (e) => new DriverFailure({ operation: "volume", message: e instanceof Error ? e.message : String(e) })
  })

const findProgram = (name: string): string | undefined =>
  ["/usr/bin", "/bin", "/usr/sbin", "/sbin"].map((dir) => NodePath.join(dir, name)).find((path) =>
    FsSync.existsSync(path)
  )

/** Where a volume's image and its mount point are on this host. */
export interface VolumePaths {
  readonly image: string
  readonly mount: string
}

export const localPaths = (dataDir: string, volumeId: string): VolumePaths => ({
  image: NodePath.join(dataDir, "volumes", `${volumeId}.img`),
  mount: NodePath.join(dataDir, "volumes", `${volumeId}.mnt`)
})

export const sharedPaths = (sharedDir: string, volumeId: string): VolumePaths & { readonly lock: string } => ({
  image: NodePath.join(sharedDir, `${volumeId}.img`),
  mount: NodePath.join(sharedDir, `${volumeId}.mnt`),
  lock: NodePath.join(sharedDir, `${volumeId}.lock`)
})

const pathsOf = (config: DriverConfig["Service"], v: Pick<VolumeMount, "volumeId" | "type">): VolumePaths =>
  v.type === "local" ? localPaths(config.dataDir, v.volumeId) : sharedPaths(config.sharedVolumesDir, v.volumeId)

/**
 * Takes the shared volume's lock and mounts its image at its mount point unless it is mounted:
 * agents of one machine never mount one image twice (the loop mount's own `flock` would refuse
 * the second anyway). Arguments: <lock> <mount point> <svc-disk-mount> <image>.
 */
const MOUNT_SHARED = `exec 9>>"$1" && "$5" 9 && { "$6" -q "$2" || "$3" "$4" "$2"; }`

const UNMOUNT_SHARED = `exec 9>>"$1" && "$4" 9 && { ! "$5" -q "$2" || umount -l "$2"; } && rm -f "$3"`

export interface HostVolumes {
  /** Makes and mounts what the sandbox's volumes need before `svc-start` binds them. */
  readonly prepare: (volumes: ReadonlyArray<VolumeMount>) => Effect.Effect<void, DriverFailure>
  /** `svc-start`'s arguments for the volumes. */
  readonly startArgs: (volumes: ReadonlyArray<VolumeMount>) => ReadonlyArray<string>
  /** The loop device of each volume, by id (those found). */
  readonly devices: (volumes: ReadonlyArray<VolumeMount>) => Effect.Effect<Readonly<Record<string, string>>>
  readonly remove: (volumeId: string, type: "local" | "shared") => Effect.Effect<void, DriverFailure>
}

export const makeVolumes = (
  config: DriverConfig["Service"],
  support: Disk.DiskSupport,
  sh: string,
  env: Readonly<Record<string, string>>
): HostVolumes => {
  const flock = findProgram("flock")
  const mountpoint = findProgram("mountpoint")
  let mounter: Promise<string> | undefined
  const diskMount = () => (mounter ??= Native.build(NodePath.join(config.dataDir, "host"), "svc-disk-mount"))

  /** The image of `sizeGb`, made unless there: formatted under a temporary name, then linked (never replaced). */
  const ensureImage = (paths: VolumePaths, sizeGb: number) =>
    Effect.gen(function*() {
      if (support._tag === "unavailable") {
        return yield* new DriverFailure({
          operation: "volume",
          message: `this host cannot make volume images: ${support.reason}`
        })
      }
      yield* tryHost(() => Fs.mkdir(paths.mount, { recursive: true, mode: 0o700 }))
      if (FsSync.existsSync(paths.image)) return
      const temp = `${paths.image}.tmp-${randomBytes(6).toString("hex")}`
      yield* tryHost(async () => {
        const handle = await Fs.open(temp, "wx", 0o600)
        try {
          await handle.truncate(sizeGb * GIB)
        } finally {
          await handle.close()
        }
      })
      yield* runChecked("volume", support.mkfs, [
        "-q",
        "-F",
        "-m",
        "0",
        "-E",
        `lazy_itable_init=1,lazy_journal_init=1,nodiscard,assume_storage_prezeroed=1,root_owner=${support.uid}:${support.uid}`,
        temp
      ], { env, timeoutMs: 60_000 }).pipe(
        Effect.andThen(tryHost(async () => {
          // Another agent of the machine may have made it meanwhile: theirs stays.
          await Fs.link(temp, paths.image).catch((e: NodeJS.ErrnoException) => {
            if (e.code !== "EEXIST") throw e
          })
        })),
        Effect.ensuring(Effect.ignore(tryHost(() => Fs.rm(temp, { force: true }))))
      )
    })

  const prepare = (volumes: ReadonlyArray<VolumeMount>) =>
    Effect.forEach(volumes, (v) =>
      Effect.gen(function*() {
        if (v.type === "local") {
          yield* tryHost(() => Fs.mkdir(NodePath.join(config.dataDir, "volumes"), { recursive: true, mode: 0o700 }))
          return yield* ensureImage(localPaths(config.dataDir, v.volumeId), v.sizeGb)
        }
        if (flock === undefined || mountpoint === undefined) {
          return yield* new DriverFailure({
            operation: "volume",
            message: "flock and mountpoint (util-linux) are needed"
          })
        }
        const paths = sharedPaths(config.sharedVolumesDir, v.volumeId)
        yield* tryHost(() => Fs.mkdir(config.sharedVolumesDir, { recursive: true, mode: 0o700 }))
        yield* ensureImage(paths, v.sizeGb)
        const disk = yield* tryHost(diskMount)
        yield* runChecked("volume", sh, [
          "-c",
          MOUNT_SHARED,
          "mount-shared",
          paths.lock,
          paths.mount,
          disk,
          paths.image,
          flock,
          mountpoint
        ], {
          env,
          timeoutMs: 30_000
        })
      }), { discard: true })

  const startArgs = (volumes: ReadonlyArray<VolumeMount>): ReadonlyArray<string> => [
    ...volumes.flatMap((v) => {
      const paths = pathsOf(config, v)
      return v.type === "local"
        ? ["--volume", "image", paths.image, paths.mount, v.subpath, v.mountPath, v.mode]
        : ["--volume", "dir", paths.mount, "-", v.subpath, v.mountPath, v.mode]
    }),
    "--shared-volumes",
    config.sharedVolumesDir
  ]

  const devices = (volumes: ReadonlyArray<VolumeMount>) =>
    Effect.sync(() => {
      const found: Record<string, string> = {}
      for (const v of volumes) {
        const image = pathsOf(config, v).image
        const real = (() => {
          try {
            return FsSync.realpathSync(image)
          } catch {
            return image
          }
        })()
        const device = Disk.devicesOf(real)[0]
        if (device !== undefined) found[v.volumeId] = device
      }
      return found
    })

  const remove = (volumeId: string, type: "local" | "shared") =>
    Effect.gen(function*() {
      if (type === "local") {
        const paths = localPaths(config.dataDir, volumeId)
        // Its sandboxes are gone (the control plane deletes only a volume nothing uses); a device
        // still closing keeps the unlinked file until it detaches.
        yield* tryHost(async () => {
          await Fs.rm(paths.image, { force: true })
          await Fs.rmdir(paths.mount).catch(() => undefined)
        })
        return
      }
      const paths = sharedPaths(config.sharedVolumesDir, volumeId)
      if (!FsSync.existsSync(paths.image) && !FsSync.existsSync(paths.mount)) return
      if (flock === undefined || mountpoint === undefined) {
        return yield* new DriverFailure({
          operation: "volume",
          message: "flock and mountpoint (util-linux) are needed"
        })
      }
      // Lazily: a sandbox still ending keeps its bind until it is gone; the image's blocks are
      // freed then.
      yield* runChecked("volume", sh, [
        "-c",
        UNMOUNT_SHARED,
        "unmount-shared",
        paths.lock,
        paths.mount,
        paths.image,
        flock,
        mountpoint
      ], {
        env,
        timeoutMs: 30_000
      })
      yield* tryHost(async () => {
        await Fs.rmdir(paths.mount).catch(() => undefined)
        await Fs.rm(paths.lock, { force: true })
      })
    })

  return { prepare, startArgs, devices, remove }
}
