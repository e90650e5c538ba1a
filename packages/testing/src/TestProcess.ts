/**
 * A role of the platform (agent, runtime, dispatcher) as a real child process, for tests that
 * kill it -9. It dies with the test process even when the runner itself is killed (setpriv
 * pdeathsig), and with the scope otherwise.
 */
import { freePort as freePortPromise } from "@svc/local-servers/Servers"
import { Duration, Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { testBridgeEnv } from "./TestBridge.ts"
import { testEncryptionKeys } from "./TestSecrets.ts"

/** The entry point of an app of the repository: `apps/<name>/src/main.ts`. */
export const appMain = (name: string): string =>
  fileURLToPath(new URL(`../../../apps/${name}/src/main.ts`, import.meta.url))

/** `ready` for `spawnRole`: the JSON line `{"event":"<event>",...}` a role prints once it serves. */
export const readyEvent = (event: string) => (stdout: string): true | undefined =>
  stdout.includes(`"event":"${event}"`) ? true : undefined

/** A free TCP port on loopback. */
export const freePort: Effect.Effect<number> = Effect.promise(freePortPromise)

export interface RoleProcess<A> {
  readonly process: ChildProcess
  /** What `ready` found in the output. */
  readonly ready: A
  /** Resolves with the exit code (null when a signal ended it). */
  readonly exited: Promise<number | null>
  /** stdout and stderr so far, for failure messages. */
  readonly output: () => string
}

/**
 * Starts `node <main> <args>` with `env` (PATH, the run's SVC_ENCRYPTION_KEYS and the test file's
 * own sandbox bridge (./TestBridge.ts) are passed on, `env` may override them) and waits until
 * `ready` recognises a line of its stdout; dies when the process exits first or after `timeout`.
 */
export const spawnRole = <A>(options: {
  readonly main: string
  readonly args?: ReadonlyArray<string>
  readonly env: Record<string, string>
  readonly ready: (stdout: string) => A | undefined
  readonly timeout?: Duration.Input
}) =>
  Effect.gen(function*() {
    const bridge = yield* Effect.promise(testBridgeEnv)
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        spawn("setpriv", ["--pdeathsig", "SIGKILL", "--", process.execPath, options.main, ...(options.args ?? [])], {
          env: {
            PATH: process.env["PATH"] ?? "/usr/bin:/bin",
            SVC_ENCRYPTION_KEYS: testEncryptionKeys(),
            ...bridge,
            ...options.env
          },
          stdio: ["ignore", "pipe", "pipe"]
        })
      ),
      (child) => kill(child)
    )
    let output = ""
    let stdout = ""
    child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")))
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
    const ready = yield* Effect.callback<A, Error>((resume) => {
      child.stdout!.on("data", (chunk: Buffer) => {
        output += chunk.toString("utf8")
        stdout += chunk.toString("utf8")
        const found = options.ready(stdout)
        if (found !== undefined) resume(Effect.succeed(found))
      })
      child.once("exit", (code) =>
        resume(Effect.fail(new Error(`${options.main} exited (${code}) before it was ready: ${output.slice(-3000)}`))))
    }).pipe(Effect.timeout(options.timeout ?? Duration.seconds(60)), Effect.orDie)
    return {
      process: child,
      ready,
      exited,
      output: () =>
        output
    } satisfies RoleProcess<A>
  })

/** SIGKILL (a crash, not a shutdown); completes once the process is gone. */
export const kill = (child: ChildProcess) =>
  Effect.callback<void>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
    child.once("exit", () => resume(Effect.void))
    child.kill("SIGKILL")
  })
