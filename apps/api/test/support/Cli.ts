/**
 * `svc` (apps/cli) as a user runs it, a process of its own, against a test's API: this process's
 * environment with the API's address and a key.
 */
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as NodePath from "node:path"

const MAIN = NodePath.resolve(import.meta.dirname, "../../../cli/src/main.ts")

/** `svc args...` against `api.base` with `api.token`: its exit code, stdout and stderr. */
export const runSvc = (api: { readonly base: string; readonly token: string }, args: ReadonlyArray<string>) =>
  Effect.promise(() =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, [MAIN, ...args], {
        env: { ...process.env, SVC_API_URL: api.base, SVC_API_KEY: api.token }
      }, (error, stdout, stderr) => resolve({ code: error ? (error.code as number) ?? 1 : 0, stdout, stderr }))
    })
  )
