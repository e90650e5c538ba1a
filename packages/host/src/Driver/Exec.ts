/**
 * Running commands inside a sandbox: `svc-enter` (native/svc-enter.c) joins the sandbox's cgroups
 * plus a pids group per exec that a timeout or an interruption kills whole, enters every
 * namespace of its init through a pidfd checked against the init's start time, and runs the
 * command as the sandbox's root with the init's own capability set, no_new_privs and seccomp
 * filter (Confinement.ts). The environment goes over a descriptor, never on a command line.
 * The file API (`Files.ts`) runs its scripts the same way. `insideCommand` is the only place
 * the host command line is assembled.
 */
import { Effect, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import { DEFAULT_MAX_OUTPUT_BYTES, DriverExecRequest, DriverExecResult, type DriverFailure } from "../Driver.ts"
import type * as Cgroups from "./Cgroups.ts"
import * as Confinement from "./Confinement.ts"
import { decodeInput, type DriverHost, HOST_ENV, type RunningSandbox, SANDBOX_PATH, tryHost } from "./Host.ts"
import { type CommandOptions, run, spawnStreaming, type StreamingOptions, type StreamingProcess } from "./Process.ts"
import type { SandboxRecord } from "./State.ts"

export type InsideOptions =
  & { readonly env: Record<string, string>; readonly cwd: string; readonly user?: string | undefined }
  & Pick<CommandOptions, "stdin" | "timeoutMs" | "maxOutputBytes">

/** A host command line: program, arguments, its complete environment, the bytes it reads on fd 3. */
export interface InsideCommand {
  readonly file: string
  readonly args: ReadonlyArray<string>
  readonly env: Readonly<Record<string, string>>
  /** The command's environment, for `svc-enter`'s descriptor 3 (never on a command line). */
  readonly fd3: Uint8Array
}

/**
 * The host command that runs `argv` inside a running sandbox: `svc-enter` joins `group`'s
 * cgroups, enters the init's namespaces (checked against its start time), takes the sandbox's
 * identity and restrictions, then `cwd` and `env`. The one place this command line is
 * assembled (exec, the file API and streaming transfers all use it).
 */
/** svc-enter's exit code when the sandbox's init is gone or is another process (native/svc-enter.c). */
export const NOT_RUNNING_EXIT = 124

export const insideCommand = (
  host: Pick<DriverHost, "confinement" | "config">,
  entry: RunningSandbox,
  group: Pick<Cgroups.ExecGroup, "procsFiles">,
  argv: ReadonlyArray<string>,
  options: { readonly env: Record<string, string>; readonly cwd: string; readonly user?: string | undefined }
): InsideCommand => ({
  file: host.confinement.enter,
  args: [
    "--pid",
    String(entry.run.pid),
    "--start-ticks",
    String(entry.run.startTicks),
    "--caps",
    Confinement.capabilityHex(),
    "--seccomp",
    host.confinement.seccomp,
    // The environment comes on fd 3: it never appears on a command line (`ps`).
    "--env-fd",
    "3",
    "--cwd",
    options.cwd,
    // Numeric uid:gid inside (an image's USER); absent: the sandbox's root.
    ...(options.user !== undefined && options.user !== "0:0" ? ["--user", options.user] : []),
    // The init's own descriptor limit (svc-start), set before the command can change it.
    "--nofile",
    String(host.config.nofile),
    ...group.procsFiles.flatMap((file) => ["--cgroup", file]),
    "--",
    ...argv
  ],
  env: HOST_ENV,
  fd3: Buffer.from(Object.entries(options.env).map(([k, v]) => `${k}=${v}\0`).join(""), "utf8")
})

export const makeExec = (host: DriverHost) => {
  const { cgroups } = host
  let execCounter = 0

  /**
   * A pids group of this command's own beside the sandbox's limits (a timeout or an
   * interruption kills it whole); removed with the scope, once its processes have ended.
   */
  const insideGroups = (entry: RunningSandbox): Effect.Effect<Cgroups.ExecGroup, DriverFailure, Scope.Scope> =>
    Effect.acquireRelease(
      tryHost(
        "exec",
        () =>
          cgroups.execGroup(
            entry.record.sandboxId,
            // No host pid in it: the sandbox sees the name in /proc/self/cgroup.
            `x${++execCounter}-${randomBytes(6).toString("hex")}`
          )
      ),
      (group) => tryHost("exec", () => group.remove()).pipe(Effect.ignore)
    )

  /** Runs argv inside the sandbox: its namespaces, its cgroups, its identity and restrictions. */
  const runInside = (entry: RunningSandbox, argv: ReadonlyArray<string>, options: InsideOptions) =>
    Effect.scoped(Effect.gen(function*() {
      const group = yield* insideGroups(entry)
      const command = insideCommand(host, entry, group, argv, options)
      return yield* run("exec", command.file, command.args, {
        env: command.env,
        fd3: command.fd3,
        ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
        ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
        ...(options.maxOutputBytes !== undefined ? { maxOutputBytes: options.maxOutputBytes } : {}),
        killTree: () => group.kill()
      })
    }))

  /**
   * Starts argv inside the sandbox like `runInside`, with stdin and stdout as streams (for
   * transfers): the processes live as long as the scope, which kills them if still running.
   */
  const spawnInside = (
    entry: RunningSandbox,
    argv: ReadonlyArray<string>,
    options:
      & { readonly env: Record<string, string>; readonly cwd: string; readonly user?: string | undefined }
      & Pick<StreamingOptions, "timeoutMs" | "maxStderrBytes">
  ): Effect.Effect<StreamingProcess, DriverFailure, Scope.Scope> =>
    Effect.gen(function*() {
      const group = yield* insideGroups(entry)
      const command = insideCommand(host, entry, group, argv, options)
      return yield* spawnStreaming("exec", command.file, command.args, {
        env: command.env,
        fd3: command.fd3,
        ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
        ...(options.maxStderrBytes !== undefined ? { maxStderrBytes: options.maxStderrBytes } : {}),
        killTree: () => group.kill()
      })
    })

  /** The environment every exec starts from; the spec's env, then the request's, override it. */
  const sandboxEnv = (record: SandboxRecord, extra: Record<string, string> = {}) => ({
    PATH: SANDBOX_PATH,
    HOME: "/root",
    HOSTNAME: record.sandboxId,
    ...record.env,
    ...extra
  })

  const exec = Effect.fn("SandboxDriver.exec")(function*(sandboxId: string, input: DriverExecRequest) {
    const request = yield* decodeInput(DriverExecRequest, input)
    const entry = yield* host.lookupRunning(sandboxId)
    const result = yield* runInside(entry, request.cmd, {
      env: sandboxEnv(entry.record, request.env),
      cwd: request.cwd ?? entry.record.workdir ?? "/",
      user: request.user ?? entry.record.user,
      ...(request.stdin !== undefined
        ? { stdin: typeof request.stdin === "string" ? Buffer.from(request.stdin, "utf8") : request.stdin }
        : {}),
      ...(request.timeoutMs !== undefined ? { timeoutMs: request.timeoutMs } : {}),
      maxOutputBytes: request.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES
    })
    // svc-enter's own 124: the init went between the lookup and the entry. Asked again, the disk
    // says whether that was it (a command that itself ends with 124 is answered as it ended).
    if (result.exitCode === NOT_RUNNING_EXIT) yield* host.lookupRunning(sandboxId)
    return new DriverExecResult(result)
  })

  return { insideGroups, runInside, spawnInside, exec }
}

export type Exec = ReturnType<typeof makeExec>
