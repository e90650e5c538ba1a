/**
 * A bare `bwrap`, as the benchmarks' baselines start it (exec-floor, files, sandboxes): the
 * namespaces a sandbox has, a root, /proc and /dev, then a command; nothing of ours.
 */

/** A user namespace in which the caller is root (`--unshare-user`, uid and gid 0). */
export const USER_NAMESPACE: ReadonlyArray<string> = ["--unshare-user", "--uid", "0", "--gid", "0"]

/** The namespaces a sandbox has: the user namespace, then pid, ipc, uts and net. */
export const SANDBOX_NAMESPACES: ReadonlyArray<string> = [
  ...USER_NAMESPACE,
  "--unshare-pid",
  "--unshare-ipc",
  "--unshare-uts",
  "--unshare-net"
]

/** `root` as `/`, read-only. */
export const readOnlyRoot = (root: string): ReadonlyArray<string> => ["--ro-bind", root, "/"]

/**
 * bwrap's arguments in this order: `namespaces` (and any other option of bwrap's own), `mounts`
 * (the root's), a new /proc and /dev, `extra` (further mounts or options), then `--` and `argv`.
 */
export const bwrapArgs = (options: {
  readonly namespaces?: ReadonlyArray<string>
  readonly mounts: ReadonlyArray<string>
  readonly extra?: ReadonlyArray<string>
  readonly argv: ReadonlyArray<string>
}): Array<string> => [
  ...(options.namespaces ?? []),
  ...options.mounts,
  "--proc",
  "/proc",
  "--dev",
  "/dev",
  ...(options.extra ?? []),
  "--",
  ...options.argv
]
