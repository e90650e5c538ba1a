/**
 * A sandbox's disk. Its writable layer (the overlay's `upper/` and `work/`) lives on an ext4 file
 * system in a sparse image file of `diskGb` GiB, `<sandbox>/disk.img`. The start step
 * (`svc-start`, see `Run.ts`) mounts it through a loop device at `<sandbox>/disk/` inside the
 * sandbox's private mount namespace, before the overlay (`native/loop-mount.h`, shared with
 * `svc-disk-mount`, which the probe here runs): the host's mount table never shows it, and the
 * device's autoclear detaches it when the namespace's last process ends (stop, a crash, a
 * reboot). A mount in the host's namespace would be copied into every mount namespace made
 * meanwhile (any other sandbox's start) and pin the device long after its own sandbox ended.
 *
 * Writing past the size fails inside with ENOSPC, files end at the file system's inode count
 * (65,536 per GiB), and the image never takes more of the host's file system than its size.
 * Project quotas on the data dir would need the host's file system made with the `project`
 * feature and mounted with `prjquota`; measured choices in the README ("Limits").
 *
 * Also here: the size of the sandbox's `/dev/shm` (a tmpfs, so memory, bounded below the memory
 * limit).
 */
import { Effect, Queue, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { DriverFailure } from "../Driver.ts"
import * as Native from "./Native.ts"
import { decode, run, runChecked } from "./Process.ts"
import type { SandboxPaths } from "./State.ts"

const GIB = 1024 ** 3

/** The environment of the host commands run here (the driver's `HOST_ENV`). */
type Env = Readonly<Record<string, string>>

// Host.ts's `tryHost`; not imported, Host.ts imports this module.
const tryHost = <A>(operation: string, f: () => Promise<A>): Effect.Effect<A, DriverFailure> =>
  Effect.tryPromise({
    try: f,
    catch: (e) => new DriverFailure({ operation, message: e instanceof Error ? e.message : String(e) })
  })

/**
 * `mkfs.ext4` without zeroing: a fresh sparse file reads as zeros, so its inode tables and journal
 * need none, now or later (the kernel's lazy init thread finds nothing to do), nor a discard. No
 * blocks reserved for root: the whole size is the sandbox's. About 5 ms for 1 GiB, 10 ms for
 * 10 GiB here.
 */
const MKFS_OPTIONS = [
  "-q",
  "-F",
  "-m",
  "0",
  "-E",
  "lazy_itable_init=1,lazy_journal_init=1,nodiscard,assume_storage_prezeroed=1"
]

/**
 * Whether this host can give sandboxes a disk image: the program that formats one, and
 * `skeleton`, which holds `upper/` (owned by the sandboxes' `uid`) and `work/`: every image starts
 * with them.
 */
export type DiskSupport =
  | {
    readonly _tag: "available"
    readonly mkfs: string
    readonly skeleton: string
    readonly uid: number
  }
  | { readonly _tag: "unavailable"; readonly reason: string }

const unavailable = (reason: string): DiskSupport => ({ _tag: "unavailable", reason })

/** What the start step mounts for one sandbox. */
export interface Layout {
  /** The image file; undefined for a sandbox made without one (before images, or on a host without loop devices). */
  readonly image: string | undefined
  /** Where the image is mounted, inside the sandbox's private mount namespace only. */
  readonly mount: string
  /** The overlay's upper and work folders: on the image, or plain folders next to it. */
  readonly upper: string
  readonly work: string
}

export const imagePath = (paths: SandboxPaths) => NodePath.join(paths.dir, "disk.img")

const imageLayout = (paths: SandboxPaths): Layout => {
  const mount = NodePath.join(paths.dir, "disk")
  return { image: imagePath(paths), mount, upper: NodePath.join(mount, "upper"), work: NodePath.join(mount, "work") }
}

const folderLayout = (paths: SandboxPaths): Layout => ({
  image: undefined,
  mount: NodePath.join(paths.dir, "disk"),
  upper: paths.upper,
  work: paths.work
})

/** The layout a sandbox was made with: its image when it has one. */
export const layoutOf = (paths: SandboxPaths): Promise<Layout> =>
  Fs.stat(imagePath(paths)).then(() => imageLayout(paths), () => folderLayout(paths))

/** `hostLimits.disk`: whether this host enforces `diskGb`. */
export const hostStatus = (support: DiskSupport): string =>
  support._tag === "available" ? "enforced" : `unavailable: ${support.reason}`

/** `limits.disk` of a run. */
export const status = (support: DiskSupport, layout: Layout): string =>
  layout.image !== undefined
    ? "applied"
    : support._tag === "unavailable"
    ? `unavailable: ${support.reason}`
    : "not enforced: this sandbox was made without a disk image; its upper/ is a folder on the host file system"

const findProgram = (name: string): string | undefined =>
  ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map((dir) => NodePath.join(dir, name)).find((path) =>
    FsSync.existsSync(path)
  )

const NICE = findProgram("nice")

/** A sparse file of `bytes`, not yet formatted. */
const makeSparse = (file: string, bytes: number, operation: string) =>
  tryHost(operation, async () => {
    const handle = await Fs.open(file, "wx", 0o600)
    try {
      await handle.truncate(bytes)
    } finally {
      await handle.close()
    }
  })

/** Makes a sparse file of `bytes` and formats it (with `skeleton`'s folders); removed again on failure. */
const format = (mkfs: string, file: string, bytes: number, env: Env, operation: string, skeleton?: string) =>
  Effect.gen(function*() {
    yield* makeSparse(file, bytes, operation)
    const populate = skeleton !== undefined ? ["-d", skeleton] : []
    yield* runChecked(operation, mkfs, [...MKFS_OPTIONS, ...populate, file], { env, timeoutMs: 60_000 }).pipe(
      Effect.tapError(() => tryHost(operation, () => Fs.rm(file, { force: true })).pipe(Effect.ignore))
    )
  })

/**
 * Checks once, at driver start, that this host can format an image and mount it through a loop
 * device in a private mount namespace (a container without loop devices or mount rights cannot):
 * about 25 ms. Where it cannot, sandboxes get plain folders and `limits.disk` says why. Also
 * makes the skeleton every image is formatted with: the overlay's `upper/`, owned by the
 * sandbox's root (`uid`), and `work/`, so that a first start has nothing to make.
 */
export const probe = (dataDir: string, bin: { readonly unshare: string; readonly sh: string }, env: Env, uid: number) =>
  Effect.gen(function*() {
    const mkfs = findProgram("mkfs.ext4")
    if (mkfs === undefined) return unavailable("mkfs.ext4 (e2fsprogs) is not installed")
    if (!FsSync.existsSync("/dev/loop-control")) return unavailable("no loop devices (/dev/loop-control is missing)")
    const built = yield* Effect.result(
      tryHost("init", () => Native.build(NodePath.join(dataDir, "host"), "svc-disk-mount"))
    )
    if (built._tag === "Failure") return unavailable(built.failure.message.slice(0, 300))
    const mounter = built.success
    const dir = yield* tryHost("init", () => Fs.mkdtemp(NodePath.join(dataDir, ".disk-probe-")))
    return yield* Effect.gen(function*() {
      const file = NodePath.join(dir, "probe.img")
      const mount = NodePath.join(dir, "mnt")
      yield* tryHost("init", () => Fs.mkdir(mount))
      const formatted = yield* Effect.result(format(mkfs, file, 32 * 1024 * 1024, env, "init"))
      if (formatted._tag === "Failure") return unavailable(formatted.failure.message.slice(0, 300))
      const mounted = yield* run("init", bin.unshare, [
        "--mount",
        "--propagation",
        "private",
        bin.sh,
        "-c",
        `"$1" "$2" "$3" && umount "$3"`,
        "sh",
        mounter,
        file,
        mount
      ], { env, timeoutMs: 30_000 })
      if (mounted.exitCode !== 0) {
        return unavailable(`a loop mount failed: ${decode(mounted.stderr).trim().slice(0, 300)}`)
      }
      const skeleton = NodePath.join(dataDir, "disk-skeleton")
      yield* tryHost("init", async () => {
        await Fs.rm(skeleton, { recursive: true, force: true })
        await Fs.mkdir(NodePath.join(skeleton, "upper"), { recursive: true, mode: 0o755 })
        await Fs.mkdir(NodePath.join(skeleton, "work"), { mode: 0o700 })
        await Fs.chown(NodePath.join(skeleton, "upper"), uid, uid)
        await Fs.chmod(skeleton, 0o700)
      })
      const available: DiskSupport = { _tag: "available", mkfs, skeleton, uid }
      return available
    }).pipe(Effect.ensuring(tryHost("init", () => Fs.rm(dir, { recursive: true, force: true })).pipe(Effect.ignore)))
  })

/** Size of the images kept formatted ahead of creates: the platform's default `disk_gb`. */
export const STOCK_GB = 1

export interface DiskStock {
  /** Moves a formatted blank image of `diskGb` GiB to `target` if one is ready; false if not. */
  readonly take: (target: string, diskGb: number) => Effect.Effect<boolean>
}

/**
 * Up to `count` blank images of `STOCK_GB` made ahead of creates in `<dataDir>/disk-stock/`: a
 * create of that size renames one into its folder instead of formatting (bench/driver.ts: a
 * create costs 1.8 ms more than without disk images with the stock, 11 ms without it). Refilled one image at a time, in the background (mkfs at nice 19), after each
 * take; an image there is complete (formatted under a `.tmp` name, then renamed), and leftovers
 * of a cut format are removed at start.
 */
export const makeStock = (
  support: DiskSupport,
  dataDir: string,
  count: number,
  env: Env
): Effect.Effect<DiskStock, DriverFailure, Scope.Scope> =>
  Effect.gen(function*() {
    if (support._tag === "unavailable" || count === 0) return { take: () => Effect.succeed(false) }
    const { mkfs, skeleton } = support
    const dir = NodePath.join(dataDir, "disk-stock")
    // The name says what an image holds: one made for another size or uid is removed.
    const name = new RegExp(`^blank-${STOCK_GB}g-${support.uid}-[0-9a-f]+\\.img$`)
    const ready = yield* tryHost("init", async () => {
      await Fs.mkdir(dir, { recursive: true, mode: 0o700 })
      const kept: Array<string> = []
      for (const file of await Fs.readdir(dir)) {
        if (name.test(file)) kept.push(NodePath.join(dir, file))
        else await Fs.rm(NodePath.join(dir, file), { force: true })
      }
      return kept
    })
    const taken = yield* Queue.unbounded<void>()
    // At the lowest CPU priority (nice 19), behind the creates it makes room for. Started by the
    // driver's spawner like every command: no fork of the agent in the middle of a create.
    const command = [...(NICE !== undefined ? [NICE, "-n", "19"] : []), mkfs, ...MKFS_OPTIONS, "-d", skeleton]
    const formatImage = (file: string) =>
      run("stock", command[0]!, [...command.slice(1), file], { env, timeoutMs: 120_000, maxOutputBytes: 4096 }).pipe(
        Effect.map((result) => result.exitCode),
        Effect.orElseSucceed(() => -1)
      )
    const refill = Effect.gen(function*() {
      while (ready.length < count) {
        const image = NodePath.join(dir, `blank-${STOCK_GB}g-${support.uid}-${randomBytes(6).toString("hex")}.img`)
        yield* makeSparse(`${image}.tmp`, STOCK_GB * GIB, "stock")
        const status = yield* formatImage(`${image}.tmp`)
        if (status !== 0) {
          yield* tryHost("stock", () => Fs.rm(`${image}.tmp`, { force: true }))
          return yield* new DriverFailure({ operation: "stock", message: `mkfs.ext4 exited with ${status}` })
        }
        yield* tryHost("stock", () => Fs.rename(`${image}.tmp`, image))
        ready.push(image)
      }
    })
    // A failed format waits for the next take before it tries again.
    yield* Effect.forkScoped(Effect.forever(Effect.andThen(Effect.ignore(refill), Queue.take(taken))))
    const take = (target: string, diskGb: number) =>
      Effect.suspend(() => {
        const image = diskGb === STOCK_GB ? ready.shift() : undefined
        if (image === undefined) return Effect.succeed(false)
        return tryHost("create", () => Fs.rename(image, target)).pipe(
          Effect.as(true),
          Effect.orElseSucceed(() => false),
          Effect.ensuring(Queue.offer(taken, undefined))
        )
      })
    return { take }
  })

/**
 * The writable layer of a new sandbox: an image of `diskGb` GiB (from the stock when it has one),
 * or plain folders where the host cannot mount one. The image comes with `upper/` and `work/`.
 */
export const makeLayer = (support: DiskSupport, stock: DiskStock, paths: SandboxPaths, diskGb: number, env: Env) =>
  support._tag === "available"
    ? Effect.gen(function*() {
      const layout = imageLayout(paths)
      yield* tryHost("create", () => Fs.mkdir(layout.mount, { mode: 0o700 }))
      if (!(yield* stock.take(layout.image!, diskGb))) {
        yield* format(support.mkfs, layout.image!, diskGb * GIB, env, "create", support.skeleton)
      }
      return layout
    })
    : tryHost("create", async () => {
      for (const dir of [paths.upper, paths.work]) await Fs.mkdir(dir, { recursive: true, mode: 0o700 })
      return folderLayout(paths)
    })

/**
 * `svc-start`'s arguments for the image: `--image <image> --image-mount <mount point>`, none when
 * the sandbox has no image. It then mounts the overlay over `layout.upper` and `layout.work`.
 */
export const startArgs = (support: DiskSupport, layout: Layout): ReadonlyArray<string> =>
  layout.image !== undefined && support._tag === "available"
    ? ["--image", layout.image, "--image-mount", layout.mount]
    : []

/** Loop devices whose backing file is `image` (the kernel shows the file's current path). */
const attachedDevices = (image: string): Array<string> => {
  const found: Array<string> = []
  let names: Array<string>
  try {
    names = FsSync.readdirSync("/sys/block")
  } catch {
    return found
  }
  for (const name of names) {
    if (!name.startsWith("loop")) continue
    // A device not attached has no `loop/` folder: asked without a throw (a read that failed
    // made an Error with its stack, ~150 per destroy on a host with that many devices).
    if (!FsSync.existsSync(`/sys/block/${name}/loop`)) continue
    let backing: string
    try {
      backing = FsSync.readFileSync(`/sys/block/${name}/loop/backing_file`, "utf8").trim()
    } catch {
      // Detached meanwhile.
      continue
    }
    if (backing === image || backing === `${image} (deleted)`) found.push(`/dev/${name}`)
  }
  return found
}

/**
 * Before `destroy` removes the image: waits until the kernel has detached its loop device. The
 * last process of the sandbox's mount namespace does it as it exits, so after the run's teardown
 * (its cgroups emptied) it is already gone: one scan of /sys/block, about 2.5 ms with 250 loop
 * devices. Still attached after 2 s means something else holds the namespace: autoclear detaches
 * it when that goes, and the image's blocks are freed then. (`stop` does not wait: a start
 * meanwhile mounts through the same device, mount never attaches one file twice.)
 */
export const awaitDetached = (paths: SandboxPaths): Effect.Effect<ReadonlyArray<string>, DriverFailure> =>
  tryHost("destroy", async () => {
    const image = await Fs.realpath(imagePath(paths)).catch(() => undefined)
    if (image === undefined) return []
    for (let i = 0;; i++) {
      const devices = attachedDevices(image)
      if (devices.length === 0 || i >= 100) return devices
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  })

/**
 * Bytes the disk images under a `sandboxes/` folder hold on the host's file system (they are
 * sparse: each grows up to its size as its sandbox writes). For a host's disk capacity.
 */
export const imagesAllocatedBytes = (sandboxesDir: string): number => {
  let total = 0
  let names: Array<string>
  try {
    names = FsSync.readdirSync(sandboxesDir)
  } catch {
    return 0
  }
  for (const name of names) {
    try {
      total += FsSync.statSync(NodePath.join(sandboxesDir, name, "disk.img")).blocks * 512
    } catch {
      // No image (a sandbox made before them, or a create cut short).
    }
  }
  return total
}

/** Bytes one sandbox's disk image holds on the host's file system; undefined without an image. */
export const allocatedBytes = (paths: SandboxPaths): Promise<number | undefined> =>
  Fs.stat(imagePath(paths)).then((stat) => stat.blocks * 512, () => undefined)

/** The loop devices `image` is attached to right now (`/dev/loopN`). */
export const devicesOf = (image: string): ReadonlyArray<string> => attachedDevices(image)

/** Whether an image is attached to a loop device right now (tests). */
export const isAttached = (image: string) => attachedDevices(image).length > 0

/**
 * Size of the sandbox's `/dev/shm` (a tmpfs: its pages are memory charged to the sandbox): half
 * the memory limit, so filling it ends in ENOSPC with memory left for the processes, instead of
 * the OOM killer taking the init.
 */
export const shmBytes = (ramMb: number) => Math.max(1, Math.floor(ramMb / 2)) * 1024 * 1024
