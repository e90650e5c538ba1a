/**
 * Running commands inside a sandbox: `nsenter` into every namespace of its init, then a nested
 * user namespace (root inside keeps its file powers and loses every capability over the
 * sandbox's network, mounts and init), inside the sandbox's cgroups plus a pids group per exec
 * that a timeout or an interruption kills whole. The file API (`Files.ts`) runs its scripts
 * the same way.
 */
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import { DEFAULT_MAX_OUTPUT_BYTES, ExecRequest, ExecResult } from "../Driver.ts"
import * as Cgroups from "./Cgroups.ts"
import { attempt, decodeInput, type DriverHost, HELPER, HOST_ENV, type RunningSandbox, SANDBOX_PATH } from "./Host.ts"
import { run, type RunOptions } from "./Process.ts"
import type { SandboxRecord } from "./State.ts"

/** Joins the given cgroups, then becomes the rest of the command line. */
const JOIN_SCRIPT = `
while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift
exec "$@"
`

/** Inside the sandbox: change to the requested folder, then become the command. */
const CWD_SCRIPT = `cd -- "$0" || exit 126; exec -- "$@"`

export type InsideOptions =
  & { readonly env: Record<string, string>; readonly cwd: string }
  & Pick<RunOptions, "stdin" | "timeoutMs" | "maxOutputBytes">

export const makeExec = (host: DriverHost) => {
  const { bin, cgroups } = host
  let execCounter = 0

  /** Runs argv inside the sandbox: its namespaces, its cgroups, a nested user namespace. */
  const runInside = (entry: RunningSandbox, argv: ReadonlyArray<string>, options: InsideOptions) =>
    Effect.gen(function*() {
      const id = entry.record.sandboxId
      const execGroup = yield* attempt("exec", () =>
        Cgroups.makeExecGroup(cgroups, id, `x${process.pid}-${++execCounter}-${randomBytes(3).toString("hex")}`)
      )
      const procsFiles = [
        ...(["memory", "cpu", "cpuacct"] as const)
          .map((c) => NodePath.join(Cgroups.groupPath(cgroups, c, id), "cgroup.procs"))
          .filter((file) => FsSync.existsSync(file)),
        ...(execGroup !== undefined ? [NodePath.join(execGroup, "cgroup.procs")] : [])
      ]
      const args = [
        "-c", JOIN_SCRIPT, "sh", ...procsFiles, "--",
        bin.nsenter, "-t", String(entry.run.pid), "-a", "--",
        // A nested user namespace: root inside keeps its file powers but holds no capability
        // over the sandbox's network, mounts or init (they belong to the parent namespace).
        HELPER, "unshare", "-U", "-r", "--",
        // The environment travels as arguments: host-side programs never see it (LD_PRELOAD).
        HELPER, "env", "-i", "--", ...Object.entries(options.env).map(([k, v]) => `${k}=${v}`),
        HELPER, "sh", "-c", CWD_SCRIPT, options.cwd, ...argv
      ]
      const result = yield* run("exec", bin.sh, args, {
        env: HOST_ENV,
        ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
        ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
        ...(options.maxOutputBytes !== undefined ? { maxOutputBytes: options.maxOutputBytes } : {}),
        killTree: () => {
          if (execGroup !== undefined) Cgroups.killGroupSync(execGroup)
        }
      }).pipe(Effect.ensuring(execGroup !== undefined ? attempt("exec", () => Cgroups.removeIfEmpty(execGroup)).pipe(Effect.ignore) : Effect.void))
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
