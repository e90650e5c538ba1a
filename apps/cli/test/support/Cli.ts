/**
 * `svc` as a user runs it, a process of its own, against the test's API (@svc/api/testing/SandboxesEnv):
 * the org's key and the API's address in its environment, nothing of this process's.
 */
import { Env } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as Os from "node:os"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

/** The CLI's entry point. */
export const MAIN = fileURLToPath(new URL("../../src/main.ts", import.meta.url))

/** The CLI's environment: the org's key and the API's address. */
export const cliEnv = Effect.map(Effect.service(Env), (env) => ({
  PATH: process.env["PATH"] ?? "/usr/bin:/bin",
  SVC_API_KEY: env.org.token,
  SVC_API_URL: env.base,
  SVC_STATE_DIR: Os.tmpdir()
}))

/** `svc args...` killed after `timeout` ms: its exit code, stdout and stderr. */
export const svcWithin = (timeout: number) => (...args: ReadonlyArray<string>) =>
  Effect.flatMap(
    cliEnv,
    (env) =>
      Effect.promise(() =>
        promisify(execFile)(process.execPath, [MAIN, ...args], { env, timeout }).then(
          ({ stderr, stdout }) => ({ code: 0, stdout, stderr }),
          (e: { code?: number; stdout?: string; stderr?: string }) => ({
            code: e.code ?? -1,
            stdout: e.stdout ?? "",
            stderr: e.stderr ?? ""
          })
        )
      )
  )

/** `svc args...` (a minute at the most): its exit code, stdout and stderr. */
export const svc = svcWithin(60_000)
