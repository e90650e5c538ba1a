/**
 * Running commands inside a sandbox: `svc-enter` (native/svc-enter.c) joins the sandbox's cgroups
 * plus a pids group per exec that a timeout or an interruption kills whole, enters every
 * namespace of its init through a pidfd checked against the init's start time, and runs the
 * command as the sandbox's root with the init's own capability set, no_new_privs and seccomp
 * filter (Confinement.ts). The environment goes over a descriptor, never on a command line.
 * The file API (`Files.ts`) runs its scripts the same way.
 */
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { DEFAULT_MAX_OUTPUT_BYTES, ExecRequest, ExecResult } from "../Driver.ts"
import * as Confinement from "./Confinement.ts"
import { attempt, decodeInput, type DriverHost, HOST_ENV, type RunningSandbox, SANDBOX_PATH } from "./Host.ts"
import { run, type RunOptions } from "./Process.ts"
import type { SandboxRecord } from "./State.ts"

export type InsideOptions =
  & { readonly env: Record<string, string>; readonly cwd: string }
  & Pick<RunOptions, "stdin" | "timeoutMs" | "maxOutputBytes">

export const makeExec = (host: DriverHost) => {
  const { cgroups } = host
  let execCounter = 0

  /** Runs argv inside the sandbox: its namespaces, its cgroups, its identity and restrictions. */
  const runInside = (entry: RunningSandbox, argv: ReadonlyArray<string>, options: InsideOptions) =>
    Effect.gen(function*() {
      const id = entry.record.sandboxId
      const execGroup = yield* attempt("exec", () =>
        cgroups.execGroup(id, `x${process.pid}-${++execCounter}-${randomBytes(3).toString("hex")}`)
      )
      const args = [
        "--pid", String(entry.run.pid),
        "--start-ticks", String(entry.run.startTicks),
        "--caps", Confinement.capabilityHex(),
        "--seccomp", host.confinement.seccomp,
        // The environment comes on fd 3: it never appears on a command line (`ps`).
        "--env-fd", "3",
        "--cwd", options.cwd,
        ...execGroup.procsFiles.flatMap((file) => ["--cgroup", file]),
        "--", ...argv
      ]
      const result = yield* run("exec", host.confinement.enter, args, {
        env: HOST_ENV,
        fd3: Buffer.from(Object.entries(options.env).map(([k, v]) => `${k}=${v}\0`).join(""), "utf8"),
        ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
        ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
        ...(options.maxOutputBytes !== undefined ? { maxOutputBytes: options.maxOutputBytes } : {}),
        killTree: () => execGroup.kill()
      }).pipe(Effect.ensuring(attempt("exec", () => execGroup.remove()).pipe(Effect.ignore)))
      return result
    })

  /** The environment every exec starts from; the spec's env, then the request's, override it. */
  const sandboxEnv = (record: SandboxRecord, extra: Record<string, string> = {}) => ({
    PATH: SANDBOX_PATH,
    HOME: "/root",
    HOSTNAME: record.sandboxId,
    ...record.env,
    ...extra
  })

  const exec = Effect.fn("SandboxDriver.exec")(function*(sandboxId: string, input: ExecRequest) {
    const request = yield* decodeInput(ExecRequest, input)
    const entry = yield* host.lookupRunning(sandboxId)
    const result = yield* runInside(entry, request.cmd, {
      env: sandboxEnv(entry.record, request.env),
      cwd: request.cwd ?? "/",
      ...(request.stdin !== undefined
        ? { stdin: typeof request.stdin === "string" ? Buffer.from(request.stdin, "utf8") : request.stdin }
        : {}),
      ...(request.timeoutMs !== undefined ? { timeoutMs: request.timeoutMs } : {}),
      maxOutputBytes: request.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES
    })
    return new ExecResult(result)
  })

  return { runInside, exec }
}

export type Exec = ReturnType<typeof makeExec>
