/**
 * The baseline of `bench/files.ts`: busybox `tar` inside a bare `bwrap` of the base root, the
 * root as a sandbox has it (`sandboxDiskRoot`) or with a host folder bound writable
 * (`hostFolderRoot`, the earlier baseline).
 */
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { Readable } from "node:stream"
import * as Cgroups from "../../packages/host/src/Driver/Cgroups.ts"
import * as Disk from "../../packages/host/src/Driver/Disk.ts"
import { HOST_ENV } from "../../packages/host/src/Driver/Host.ts"
import * as Native from "../../packages/host/src/Driver/Native.ts"
import * as Spawner from "../../packages/host/src/Driver/Spawner.ts"
import { sandboxPaths } from "../../packages/host/src/Driver/State.ts"
import { bwrapArgs, readOnlyRoot, SANDBOX_NAMESPACES } from "./Bwrap.ts"

/** Where a baseline's `bwrap` runs: how it is started and what its root is. */
export interface BaselineRoot {
  /** The command `bwrap` is run by (empty: directly). */
  readonly prefix: ReadonlyArray<string>
  /** bwrap's mounts of the root and of the folder written. */
  readonly binds: ReadonlyArray<string>
}

/** The earlier baseline: the base root read-only, a host folder (the host's ext4, its page cache) bound writable. */
export const hostFolderRoot = (root: string, work: string, mount: string): BaselineRoot => ({
  prefix: [],
  binds: [...readOnlyRoot(root), "--bind", work, mount]
})

/** Joins the cgroups named (`$1` of them), then runs the rest: a baseline command under the sandbox's limits. */
const JOIN_SCRIPT =
  "n=$1; shift; while [ \"$n\" -gt 0 ]; do echo $$ > \"$1\" || exit 1; shift; n=$((n - 1)); done; exec \"$@\""

/**
 * The baseline's root as a sandbox has it (`native/svc-start.c`, `Driver/Disk.ts`): the base
 * template under an overlay whose upper and work folders are on an ext4 image of the sandbox's
 * `disk_gb`, made by the driver's own code (`Disk.probe`, `Disk.makeLayer`: the same `mkfs.ext4`
 * options) and mounted through a loop device by its own helper (`svc-disk-mount`, the same
 * `loop-mount.h` as svc-start) in a private mount namespace; every process of it in cgroups with
 * the sandbox's limits (`Cgroups.prepare`: `ramMb` of memory, 1 CPU, 1024 pids), so that
 * the file's page cache is charged to a group of the sandbox's size, as the sandbox's is. The
 * namespace is held for the whole run by one process (a sandbox's image also stays mounted);
 * each baseline command enters it (`nsenter`), joins the groups and runs `bwrap` of the overlay.
 * What differs from a sandbox: no idmapped layers, no seccomp filter, no network namespace setup.
 */
export const sandboxDiskRoot = (template: string, diskGb: number, ramMb: number, log: (line: string) => void) =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-files-disk-")),
      (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
    )
    // The driver's commands (mkfs) start through its spawner, as in the agent.
    const spawner = yield* Effect.promise(() => Native.build(NodePath.join(dir, "host"), "svc-spawner"))
    yield* Effect.acquireRelease(Effect.sync(() => Spawner.use(spawner)), (used) => Effect.sync(used.release))
    const support = yield* Disk.probe(dir, { unshare: "/usr/bin/unshare", sh: "/bin/sh" }, HOST_ENV, 0)
    if (support._tag === "unavailable") throw new Error(`no disk images on this host: ${support.reason}`)
    const paths = sandboxPaths(dir, "baseline")
    const merged = NodePath.join(paths.dir, "root")
    yield* Effect.promise(() => Fs.mkdir(merged, { recursive: true }))
    const layout = yield* Disk.makeLayer(support, { take: () => Effect.succeed(false) }, paths, diskGb, HOST_ENV)
    const mounter = yield* Effect.promise(() => Native.build(NodePath.join(dir, "host"), "svc-disk-mount"))
    const cgroups = Cgroups.make({ root: "/sys/fs/cgroup", hostId: `bench-files-${process.pid}` })
    const prepared = yield* Effect.acquireRelease(
      Effect.promise(() => cgroups.prepare("baseline", { ramMb, cpu: 1, pidsMax: 1024, diskGb })),
      () =>
        Effect.promise(async () => {
          await cgroups.removeAll("baseline")
          await cgroups.removeHost()
        })
    )
    const holder = yield* Effect.acquireRelease(
      Effect.promise(() =>
        new Promise<ReturnType<typeof spawn>>((resolve, reject) => {
          const child = spawn("unshare", [
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            `${JOIN_SCRIPT.replace("exec \"$@\"", "")}
"$1" "$2" "$3" || exit 1
mount -t overlay overlay -o "lowerdir=$4,upperdir=$5,workdir=$6" "$7" || exit 1
echo ready
exec sleep infinity`,
            "sh",
            String(prepared.procsFiles.length),
            ...prepared.procsFiles,
            mounter,
            layout.image!,
            layout.mount,
            template,
            layout.upper,
            layout.work,
            merged
          ], { stdio: ["ignore", "pipe", "pipe"], env: HOST_ENV })
          let stderr = ""
          child.stderr!.on("data", (c: Buffer) => (stderr += c.toString("utf8")))
          child.stdout!.on("data", (c: Buffer) => c.toString("utf8").includes("ready") && resolve(child))
          child.on("error", reject)
          child.on("exit", (code) => reject(new Error(`the baseline's disk: exit ${code}: ${stderr}`)))
        })
      ),
      (child) => Effect.sync(() => child.kill("SIGKILL"))
    )
    const { cpu, memory, pids } = prepared.limits
    log(
      `baseline disk: ${layout.image} (${diskGb} GiB) at ${merged}; limits: memory ${memory}, cpu ${cpu}, pids ${pids}`
    )
    return {
      prefix: [
        "nsenter",
        "-t",
        String(holder.pid),
        "-m",
        "--",
        "sh",
        "-c",
        JOIN_SCRIPT,
        "sh",
        String(prepared.procsFiles.length),
        ...prepared.procsFiles
      ],
      binds: ["--bind", merged, "/"]
    } satisfies BaselineRoot as BaselineRoot
  })

/** The root's busybox (`tar`, `rm`) inside `bwrap` of `at`, with the namespaces a sandbox has. */
export const bwrapBusybox = (at: BaselineRoot, args: ReadonlyArray<string>, input?: Iterable<Buffer>) =>
  new Promise<number>((resolve, reject) => {
    const command = [
      ...at.prefix,
      "bwrap",
      ...bwrapArgs({ namespaces: SANDBOX_NAMESPACES, mounts: at.binds, argv: ["/bin/busybox", ...args] })
    ]
    const child = spawn(command[0]!, command.slice(1), {
      stdio: [input !== undefined ? "pipe" : "ignore", "pipe", "pipe"],
      env: HOST_ENV
    })
    let bytes = 0
    let stderr = ""
    child.stdout!.on("data", (c: Buffer) => (bytes += c.length))
    child.stderr!.on("data", (c: Buffer) => (stderr += c.toString("utf8")))
    child.on("error", reject)
    child.on(
      "exit",
      (code) =>
        code === 0 ? resolve(bytes) : reject(new Error(`bwrap busybox ${args.join(" ")}: exit ${code}: ${stderr}`))
    )
    if (input !== undefined) Readable.from(input, { objectMode: false }).pipe(child.stdin!)
  })
