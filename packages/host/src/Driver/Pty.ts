/**
 * A terminal in a sandbox: `svc-enter --pty` opens a terminal of the sandbox's own devpts, runs
 * the shell on it as its controlling terminal (with the sandbox's identity, capability set,
 * seccomp filter and cgroups, as every exec) and relays its bytes over its stdin and stdout;
 * resizes go as `COLS ROWS` lines over descriptor 4. Closing the session hangs the terminal up
 * (the shell gets SIGHUP), and a moment later kills whatever of it is left.
 */
import * as NodeStream from "@effect/platform-node/NodeStream"
import { Effect, Stream } from "effect"
import type { Writable } from "node:stream"
import { DriverFailure, PtyRequest, type PtySession } from "../Driver.ts"
import { NOT_RUNNING_EXIT } from "./Exec.ts"
import { decodeInput, type DriverHost, invalid } from "./Host.ts"
import type { Processes } from "./Processes.ts"

/** The login shell: bash where the template has it, else sh. */
const DEFAULT_SHELL = ["/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l"]

/** After a hang-up, what is left of the terminal's processes is killed after this long. */
const HANGUP_GRACE_MS = 1_000

const failure = (message: string) => new DriverFailure({ operation: "pty", message })

export const makePty = (host: DriverHost, processes: Processes) =>
  Effect.fn("SandboxDriver.pty")(function*(sandboxId: string, input: PtyRequest) {
    const request = yield* decodeInput(PtyRequest, input)
    const entry = yield* host.lookupRunning(sandboxId)
    const group = yield* processes.newGroup(entry, "t")
    const { child, fd4 } = yield* Effect.acquireRelease(
      processes.spawnEntered(entry, group, request.cmd ?? DEFAULT_SHELL, {
        env: processes.sandboxEnv(entry.record, { TERM: "xterm-256color", ...request.env }),
        cwd: "/root",
        stdin: true,
        extra: ["--pty", `${request.cols},${request.rows}`, "--control-fd", "4"],
        fd4: "in"
      }).pipe(Effect.tapError(() => Effect.promise(() => group.remove().catch(() => undefined)))),
      ({ child, kill }) =>
        Effect.sync(() => {
          if (child.exitCode === null && child.signalCode === null) {
            // Hang up first (the shell may save its history), then make sure.
            child.stdin?.end()
            setTimeout(() => {
              kill()
              void group.remove().catch(() => undefined)
            }, HANGUP_GRACE_MS).unref()
          } else {
            void group.remove().catch(() => undefined)
          }
        })
    )
    const stdin = child.stdin as Writable
    const control = fd4 as Writable
    control.on("error", () => undefined)
    const stderr: Array<Buffer> = []
    child.stderr!.on("data", (chunk: Buffer) => {
      if (stderr.length < 16) stderr.push(chunk)
    })
    const exited = new Promise<number>((resolve) => {
      // The spawner died under it: it was killed, and so is what it started.
      child.once("error", () => {
        child.killGroup("SIGKILL")
        group.kill()
        resolve(255)
      })
      child.once("exit", (code, signal) => {
        // The relay has copied everything before it exits: stdout ends right after.
        const done = () => resolve(code ?? (signal === "SIGKILL" ? 137 : signal === "SIGHUP" ? 129 : 128))
        if (child.stdout!.readableEnded || child.stdout!.destroyed) done()
        else {
          child.stdout!.once("close", done)
          setTimeout(done, 200).unref()
        }
      })
    })

    const exit = Effect.flatMap(Effect.promise(() => exited), (code) => {
      if (code === NOT_RUNNING_EXIT) return Effect.fail(failure("the sandbox is not running"))
      if (code === 125) {
        return Effect.andThen(
          Effect.logWarning("agent: a terminal could not start", {
            stderr: Buffer.concat(stderr).toString("utf8").slice(0, 500)
          }),
          Effect.fail(failure("the terminal could not start"))
        )
      }
      return Effect.succeed(code)
    })

    const write = (bytes: Uint8Array) =>
      Effect.callback<void>((resume) => {
        if (stdin.destroyed || stdin.writableEnded) return resume(Effect.void)
        if (stdin.write(bytes)) return resume(Effect.void)
        const done = () => {
          stdin.off("drain", done)
          stdin.off("close", done)
          resume(Effect.void)
        }
        stdin.once("drain", done)
        stdin.once("close", done)
        return Effect.sync(() => {
          stdin.off("drain", done)
          stdin.off("close", done)
        })
      })

    const resize = (cols: number, rows: number) =>
      Number.isInteger(cols) && Number.isInteger(rows) && cols >= 1 && rows >= 1 && cols <= 1000 && rows <= 1000
        ? Effect.sync(() => {
          if (!control.destroyed) control.write(`${cols} ${rows}\n`)
        })
        : Effect.fail(invalid("cols and rows: 1 to 1000"))

    const output = NodeStream.fromReadable<Uint8Array, DriverFailure>({
      evaluate: () => child.stdout!,
      onError: () => failure("the terminal's output failed"),
      closeOnDone: false
    }).pipe(Stream.catch(() => Stream.empty))

    return { output, write, resize, exit } satisfies PtySession
  })
