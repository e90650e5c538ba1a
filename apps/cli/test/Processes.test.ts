/**
 * `svc sandbox terminal|spawn|ps|logs|kill` against the API, a real agent and real sandboxes.
 * The terminal runs in a real terminal: a tmux session of its own (its own server socket), keys
 * sent with `send-keys`, the screen read with `capture-pane`, the window resized (SIGWINCH).
 */
import { expect, layer } from "@effect/vitest"
import { create, EnvLayer, waitState } from "@svc/api/testing/SandboxesEnv"
import { Duration, Effect } from "effect"
import { execFile } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { promisify } from "node:util"
import { cliEnv, MAIN, svc } from "./support/Cli.ts"

const TMUX = "/usr/bin/tmux"

/** A tmux server of this test's own; killed with the scope. */
const tmuxServer = Effect.acquireRelease(
  Effect.sync(() => {
    const socket = `svc-test-${randomBytes(4).toString("hex")}`
    const run = (...args: ReadonlyArray<string>) =>
      Effect.promise(() =>
        promisify(execFile)(TMUX, ["-L", socket, "-f", "/dev/null", ...args], {
          env: { PATH: "/usr/bin:/bin", TERM: "xterm" }
        })
          .then(({ stdout }) => stdout)
      )
    return { socket, run }
  }),
  ({ socket }) =>
    Effect.promise(async () => {
      await promisify(execFile)(TMUX, ["-L", socket, "kill-server"]).catch(() => undefined)
      // tmux leaves its socket file behind.
      Fs.rmSync(NodePath.join(process.env["TMUX_TMPDIR"] ?? "/tmp", `tmux-${process.getuid?.() ?? 0}`, socket), {
        force: true
      })
    })
)

const until = <A, R>(observe: Effect.Effect<A, never, R>, check: (a: A) => boolean, what: string) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 30_000
    while (true) {
      const value = yield* observe
      if (check(value)) return value
      if (Date.now() > deadline) return yield* Effect.die(new Error(`timed out waiting for ${what}: ${String(value)}`))
      yield* Effect.sleep(Duration.millis(100))
    }
  })

layer(EnvLayer, { excludeTestServices: true, timeout: 240_000 })("svc sandbox (processes, terminal)", (it) => {
  it.effect("svc sandbox terminal in tmux: raw keys, the window's size followed, the shell's exit code", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local" })
      yield* waitState(s.id, "running")
      const tmux = yield* tmuxServer
      // The key goes in a script only this user reads, not on a command line.
      const dir = Fs.mkdtempSync(NodePath.join(Os.tmpdir(), "svc-cli-terminal-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true })))
      const env = yield* cliEnv
      const script = NodePath.join(dir, "run.sh")
      Fs.writeFileSync(
        script,
        [
          "#!/bin/sh",
          ...Object.entries(env).map(([k, v]) => `export ${k}='${v}'`),
          `'${process.execPath}' '${MAIN}' sandbox terminal ${s.id}`,
          "echo \"CLI-EXIT=$?\"",
          "sleep 600"
        ].join("\n"),
        { mode: 0o700 }
      )
      yield* tmux.run("new-session", "-d", "-s", "t", "-x", "100", "-y", "30", script)
      const screen = tmux.run("capture-pane", "-p", "-t", "t")

      yield* tmux.run("send-keys", "-t", "t", "stty size; echo typed-$((40+2))", "Enter")
      const first = yield* until(screen, (text) => text.includes("typed-42"), "the typed command's output")
      expect(first).toContain("30 100")

      // Raw mode: a Ctrl-C goes to the sandbox's shell, not to the CLI (which keeps running).
      // (The Ctrl-C goes once the command runs: sent while the shell still reads its line, it
      // could land before the sleep and leave the next line typed into the sleep.)
      yield* tmux.run("send-keys", "-t", "t", "echo sleeping-$((3+4)); sleep 1000", "Enter")
      yield* until(screen, (text) => text.includes("sleeping-7"), "the sleep to start")
      yield* tmux.run("send-keys", "-t", "t", "C-c")
      yield* tmux.run("send-keys", "-t", "t", "echo after-ctrl-c-$((1+2))", "Enter")
      yield* until(screen, (text) => text.includes("after-ctrl-c-3"), "the shell after Ctrl-C")

      // The window resized: SIGWINCH, and the sandbox's terminal follows.
      yield* tmux.run("resize-window", "-t", "t", "-x", "120", "-y", "40")
      yield* tmux.run("send-keys", "-t", "t", "clear; stty size; echo sized-$((2+2))", "Enter")
      const resized = yield* until(screen, (text) => text.includes("sized-4"), "the output after the resize")
      expect(resized).toContain("40 120")

      yield* tmux.run("send-keys", "-t", "t", "exit 5", "Enter")
      yield* until(screen, (text) => text.includes("CLI-EXIT=5"), "the CLI's exit code")
    }).pipe(Effect.scoped))

  it.effect("svc sandbox spawn, ps, logs, kill", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local" })
      yield* waitState(s.id, "running")
      const spawned = yield* svc(
        "sandbox",
        "spawn",
        s.id,
        "--",
        "sh",
        "-c",
        "trap 'echo bye; exit 4' TERM; echo hello; while true; do sleep 0.1; done"
      )
      expect(spawned.code, spawned.stderr).toBe(0)
      const pid = spawned.stdout.trim()
      expect(pid).toMatch(/^\d+$/)
      const listed = yield* svc("sandbox", "ps", s.id)
      expect(listed.stdout).toMatch(new RegExp(`${pid}\\s+running\\s+sh -c trap`))
      const logs = yield* until(svc("sandbox", "logs", s.id, pid), (r) => r.stdout.includes("hello"), "its output")
      expect(logs.code).toBe(0)
      const killed = yield* svc("sandbox", "kill", s.id, pid)
      expect(killed.code, killed.stderr).toBe(0)
      const followed = yield* svc("sandbox", "logs", s.id, pid, "--follow")
      expect(followed.stdout).toBe("hello\nbye\n")
      expect(followed.stderr).toContain("[exited 4: exited]")
      const after = yield* svc("sandbox", "ps", s.id)
      expect(after.stdout).toMatch(new RegExp(`${pid}\\s+exited 4 \\(exited\\)`))
      const missing = yield* svc("sandbox", "kill", s.id, "999999")
      expect(missing.code).toBe(1)
      expect(missing.stderr).toContain("error not_found")
    }).pipe(Effect.scoped))
})
