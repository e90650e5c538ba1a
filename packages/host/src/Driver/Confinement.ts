/**
 * Who a sandbox's processes are and what they may do, shared by its init (bubblewrap) and every
 * command entered into it (`svc-enter`): the user-namespace identity, the capability set and the
 * seccomp filter. Also prepares the host files that carry them: the compiled filter, and the
 * `svc-start` and `svc-enter` binaries (`Native.ts`), built once per source version.
 */
import { createHash } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import * as Native from "./Native.ts"
import * as Seccomp from "./Seccomp.ts"

/** A sandbox's ids: 0..65535 inside. */
export const ID_COUNT = 65536

/**
 * Files on disk (templates, layers, disks, volumes) are owned by the canonical range: uid n
 * inside is `uidBase + n` there, whichever sandbox wrote it. Each running sandbox is a range of
 * its own, its slot's (`slotUid`): the per-user limits of the kernel (inotify instances and
 * watches, RLIMIT_NPROC, pipe buffers, message queues, keys) count per host uid, and two
 * sandboxes never share one. svc-start shows each sandbox its files through idmapped mounts
 * (`native/idmap.h`): canonical `uidBase + n` on disk is `slotUid + n` to the sandbox.
 */
export const slotUid = (uidBase: number, slot: number) => uidBase + ID_COUNT * (slot + 1)

/** The highest id a slot may reach: uid 2^32-1 is the kernel's "no id", and 2^32-2 is reserved with it. */
const TOP_ID = 0xffff_0000

/** Why `slots` ranges above `uidBase` do not fit in the host's uid space, if they do not. */
export const slotsOverflow = (uidBase: number, slots: number): string | undefined =>
  slotUid(uidBase, slots) > TOP_ID
    ? `${slots} uid ranges of ${ID_COUNT} above ${uidBase} pass ${TOP_ID}: at most ${
      Math.floor((TOP_ID - uidBase) / ID_COUNT) - 1
    }`
    : undefined

/** The uid (and gid) map of a sandbox's user namespace: 0..65535 inside are `uid`..`uid + 65535`. */
export const uidMap = (uid: number) => `0 ${uid} ${ID_COUNT}\n`

/**
 * The capabilities root inside keeps: Docker's default set without NET_RAW (no raw frames or
 * spoofed packets) and MKNOD (a user namespace cannot use device nodes it makes anyway). They
 * act only on what the sandbox's user namespace owns: its files, its processes, its own ports.
 * Never SYS_ADMIN (mounts), NET_ADMIN (addresses, routes), SYS_PTRACE beyond its own processes,
 * SYS_MODULE, SYS_TIME and the rest.
 */
export const CAPABILITIES: ReadonlyArray<readonly [string, number]> = [
  ["CAP_CHOWN", 0],
  ["CAP_DAC_OVERRIDE", 1],
  ["CAP_FOWNER", 3],
  ["CAP_FSETID", 4],
  ["CAP_KILL", 5],
  ["CAP_SETGID", 6],
  ["CAP_SETUID", 7],
  ["CAP_SETPCAP", 8],
  ["CAP_NET_BIND_SERVICE", 10],
  ["CAP_SYS_CHROOT", 18],
  ["CAP_AUDIT_WRITE", 29],
  ["CAP_SETFCAP", 31]
]

/** The set as `/proc/<pid>/status` prints it (CapEff), 16 hex digits. */
export const capabilityMask = (): bigint => CAPABILITIES.reduce((mask, [, bit]) => mask | (1n << BigInt(bit)), 0n)

export const capabilityHex = (): string => capabilityMask().toString(16).padStart(16, "0")

/**
 * Why `uidBase` and the `slots` ranges above it cannot be used on this host, if they cannot: a
 * login or system user, or a subordinate range handed to someone (`/etc/subuid`,
 * `/etc/subgid`), inside them would share its files with every sandbox's root, or its
 * processes and limits with one sandbox.
 */
export const rangeConflict = async (
  uidBase: number,
  slots = 0,
  files: { readonly passwd?: string; readonly group?: string; readonly subuid?: string; readonly subgid?: string } = {}
): Promise<string | undefined> => {
  const end = slotUid(uidBase, slots)
  const inRange = (id: number, count = 1) => id < end && id + count > uidBase
  for (const file of [files.passwd ?? "/etc/passwd", files.group ?? "/etc/group"]) {
    const text = await Fs.readFile(file, "utf8").catch(() => "")
    for (const line of text.split("\n")) {
      const [name, , id] = line.split(":")
      if (name && id !== undefined && inRange(Number(id))) return `${file}: ${name} has id ${id}`
    }
  }
  for (const file of [files.subuid ?? "/etc/subuid", files.subgid ?? "/etc/subgid"]) {
    const text = await Fs.readFile(file, "utf8").catch(() => "")
    for (const line of text.split("\n")) {
      const [name, start, count] = line.split(":")
      if (name && start !== undefined && count !== undefined && inRange(Number(start), Number(count))) {
        return `${file}: ${name}'s range ${start}+${count}`
      }
    }
  }
  return undefined
}

export interface ConfinementFiles {
  /** The compiled seccomp filter (given to bubblewrap on a descriptor, read by svc-enter). */
  readonly seccomp: string
  /** The `svc-start` binary: a sandbox's start, up to exec'ing bubblewrap as the sandboxes' uid. */
  readonly start: string
  /** The `svc-enter` binary. */
  readonly enter: string
  /** The `svc-spawner` binary: starts the driver's commands without forking the agent (`Spawner.ts`). */
  readonly spawner: string
  /**
   * The `svc-init` binary (static): a sandbox's pid 1, not dumpable, so that root inside cannot
   * ptrace it or reach its descriptors; copied into the helper folder (`Host.ts`).
   */
  readonly init: string
  /** The `svc-watch` binary (static): a folder's watcher run inside the sandbox; copied beside `init`. */
  readonly watch: string
  /**
   * The `svc-ctx` binary (static): a code context's client, run inside the sandbox per run
   * (`packages/sandboxes/src/Contexts.ts`); copied beside `init`.
   */
  readonly ctx: string
}

/**
 * Writes the filter and builds `svc-start`, `svc-enter`, `svc-spawner`, `svc-init`, `svc-watch` and `svc-ctx` under `dir` (root-only), when missing
 * or out of date. Files are written beside their final name and renamed: concurrent agents see
 * whole files.
 */
export const prepare = async (dir: string): Promise<ConfinementFiles> => {
  await Fs.mkdir(dir, { recursive: true, mode: 0o700 })
  await Fs.chmod(dir, 0o700)
  const filter = Seccomp.compile()
  const seccomp = NodePath.join(dir, `seccomp-${createHash("sha256").update(filter).digest("hex").slice(0, 12)}.bpf`)
  if (!FsSync.existsSync(seccomp)) {
    const temp = `${seccomp}.tmp-${process.pid}`
    await Fs.writeFile(temp, filter, { mode: 0o600 })
    await Fs.rename(temp, seccomp)
  }
  const start = await Native.build(dir, "svc-start")
  const enter = await Native.build(dir, "svc-enter")
  const spawner = await Native.build(dir, "svc-spawner")
  const init = await Native.build(dir, "svc-init", undefined, ["-static"])
  const watch = await Native.build(dir, "svc-watch", undefined, ["-static"])
  const ctx = await Native.build(dir, "svc-ctx", undefined, ["-static"])
  return { seccomp, start, enter, spawner, init, watch, ctx }
}
