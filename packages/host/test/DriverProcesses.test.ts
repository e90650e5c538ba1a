/**
 * Streamed exec, background processes and terminals (`src/Driver/Processes.ts`, `Pty.ts`,
 * `native/svc-enter.c`): output as it comes, processes that outlive the call, and a terminal
 * with the sandbox's identity, filter and limits.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Fiber, Queue, Stream } from "effect"
import type { ProcessEvent, PtySession } from "../src/Driver.ts"
import { sh, spec, TestDriver, text, uniqueId, withSandbox } from "./fixtures/support.ts"

const outputOf = (events: ReadonlyArray<ProcessEvent>, stream: "stdout" | "stderr" = "stdout") =>
  events.flatMap((e) => (e._tag === "Output" && e.stream === stream ? [text(e.bytes)] : [])).join("")

/** Reads the terminal until its output so far contains `needle`. */
const readUntil = (output: Queue.Dequeue<Uint8Array, any>, seen: { text: string }, needle: string | RegExp) =>
  Effect.gen(function*() {
    const has = () => (typeof needle === "string" ? seen.text.includes(needle) : needle.test(seen.text))
    while (!has()) seen.text += text(yield* Queue.take(output))
    return seen.text
  })

const typeInto = (session: PtySession, line: string) => session.write(new TextEncoder().encode(line))

layer(TestDriver.layer(), { excludeTestServices: true, timeout: 120_000 })(
  "SandboxDriver processes (bubblewrap)",
  (it) => {
    it.effect("execStream: the first output arrives while the command still runs; then the exit", () =>
      Effect.gen(function*() {
        const { driver } = yield* TestDriver
        const id = uniqueId("stream")
        yield* withSandbox(driver, spec(id))
        const events = yield* driver.execStream(
          id,
          sh("echo ready; echo warn >&2; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done; exit 4", {
            timeoutMs: 60_000
          })
        )
        const queue = yield* Stream.toQueue(events, { capacity: "unbounded" })
        const first: ProcessEvent = yield* Queue.take(queue)
        assert.deepStrictEqual(first._tag === "Output" ? [first.stream, text(first.bytes)] : [], ["stdout", "ready\n"])
        // Only now does the command get what it waits for.
        yield* driver.exec(id, sh("touch /tmp/go"))
        const rest: Array<ProcessEvent> = [first]
        while (true) {
          const event: ProcessEvent | undefined = yield* Queue.take(queue).pipe(
            Effect.catch(() => Effect.succeed(undefined))
          )
          if (event === undefined) break
          rest.push(event)
        }
        assert.strictEqual(outputOf(rest), "ready\ndone\n")
        assert.strictEqual(outputOf(rest, "stderr"), "warn\n")
        const last = rest.at(-1)!
        assert.strictEqual(last._tag, "Exit")
        assert.strictEqual(last._tag === "Exit" ? last.exitCode : -1, 4)
      }).pipe(Effect.scoped))

    it.effect("background processes: output kept and followed, stdin, signals, exit codes, the sandbox's stop", () =>
      Effect.gen(function*() {
        const { driver } = yield* TestDriver
        const id = uniqueId("bg")
        yield* withSandbox(driver, spec(id))

        const cat = yield* driver.startProcess(id, {
          cmd: ["sh", "-c", "echo started; cat; echo eof >&2"],
          stdin: true
        })
        assert.strictEqual(cat.state, "running")
        // The pid is the sandbox's own.
        const ps = yield* driver.exec(id, sh(`cat /proc/${cat.pid}/cmdline | tr '\\0' ' '`))
        assert.include(text(ps.stdout), "sh -c echo started")

        const follower = yield* driver.processOutput(id, cat.pid, true).pipe(
          Effect.flatMap((s) => Stream.runCollect(s)),
          Effect.forkScoped
        )
        yield* driver.processStdin(id, cat.pid, Stream.make(new TextEncoder().encode("hello\n")), false)
        yield* driver.processStdin(id, cat.pid, Stream.make(new TextEncoder().encode("world\n")), true)
        const followed = yield* Fiber.join(follower)
        assert.strictEqual(outputOf(followed), "started\nhello\nworld\n")
        assert.strictEqual(outputOf(followed, "stderr"), "eof\n")
        const exit = followed.at(-1)!
        assert.deepInclude(exit, { _tag: "Exit", exitCode: 0, reason: "exited" })
        const done = yield* driver.process(id, cat.pid)
        assert.strictEqual(done.state, "exited")
        assert.strictEqual(done.exitCode, 0)
        // Its kept output, after it ended, with the exit last.
        const replay = yield* Stream.runCollect(yield* driver.processOutput(id, cat.pid, false))
        assert.strictEqual(outputOf(replay), "started\nhello\nworld\n")
        // An exited process takes neither input nor signals.
        const refused = yield* Effect.flip(driver.signalProcess(id, cat.pid, "TERM"))
        assert.strictEqual(refused._tag, "ProcessRefused")

        const server = yield* driver.startProcess(id, {
          cmd: ["sh", "-c", "trap 'echo got TERM; exit 9' TERM; echo up; while true; do sleep 0.1; done"],
          stdin: false
        })
        yield* Stream.runCollect(yield* driver.processOutput(id, server.pid, true)).pipe(
          Effect.timeout(500),
          Effect.ignore
        )
        yield* driver.signalProcess(id, server.pid, "TERM")
        const ended = yield* Stream.runCollect(yield* driver.processOutput(id, server.pid, true))
        assert.strictEqual(outputOf(ended), "up\ngot TERM\n")
        assert.deepInclude(ended.at(-1)!, { _tag: "Exit", exitCode: 9, reason: "exited" })

        const killed = yield* driver.startProcess(id, { cmd: ["sleep", "1000"], stdin: false })
        yield* driver.signalProcess(id, killed.pid, "KILL")
        const killedEnd = yield* Stream.runCollect(yield* driver.processOutput(id, killed.pid, true))
        assert.deepInclude(killedEnd.at(-1)!, { _tag: "Exit", exitCode: 137, reason: "killed" })

        const missing = yield* Effect.flip(driver.startProcess(id, { cmd: ["true"], cwd: "/no/such", stdin: false }))
        assert.strictEqual(missing._tag, "InvalidSandboxRequest")
        assert.strictEqual((yield* Effect.flip(driver.process(id, 999_999)))._tag, "ProcessRefused")

        // The sandbox stops under a running process: it ends and says so.
        const longer = yield* driver.startProcess(id, { cmd: ["sleep", "1000"], stdin: false })
        yield* driver.stop(id)
        const stopped = yield* driver.process(id, longer.pid)
        assert.strictEqual(stopped.state, "exited")
        assert.strictEqual(stopped.reason, "sandbox_stopped")
        const list = yield* driver.processes(id)
        assert.deepStrictEqual(list.map((p) => p.pid), [longer.pid, killed.pid, server.pid, cat.pid])
        assert.strictEqual(
          (yield* Effect.flip(driver.startProcess(id, { cmd: ["true"], stdin: false })))._tag,
          "SandboxNotRunning"
        )
      }).pipe(Effect.scoped))

    it.effect("pty: a shell with the sandbox's identity, filter and cgroups; resize; exit code", () =>
      Effect.gen(function*() {
        const { driver } = yield* TestDriver
        const id = uniqueId("pty")
        yield* withSandbox(driver, spec(id))
        const session = yield* driver.pty(id, { cols: 100, rows: 30 })
        const output = yield* Stream.toQueue(session.output, { capacity: "unbounded" })
        const seen = { text: "" }
        yield* typeInto(session, "stty size; tty; echo marker-$((40+2))\n")
        yield* readUntil(output, seen, "marker-42")
        assert.include(seen.text, "30 100")
        assert.match(seen.text, /\/dev\/pts\/\d+/)

        yield* session.resize(120, 40)
        yield* typeInto(session, "stty size; echo size-$((1+1))\n")
        yield* readUntil(output, seen, "size-2")
        assert.include(seen.text, "40 120")

        // The same identity and restrictions as an exec: root of the sandbox, seccomp, no_new_privs.
        yield* typeInto(session, "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; echo id-$(id -u)-end\n")
        yield* readUntil(output, seen, /id-0-end/)
        const viaExec = text(
          (yield* driver.exec(id, sh("grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status"))).stdout
        )
        for (const line of viaExec.trim().split("\n")) {
          assert.include(seen.text, line.replace(/\s+/g, "\t").trim().split("\t")[1]!)
        }
        assert.match(seen.text, /Seccomp:\s+2/)
        assert.match(seen.text, /NoNewPrivs:\s+1/)

        yield* typeInto(session, "exit 3\n")
        assert.strictEqual(yield* session.exit, 3)
      }).pipe(Effect.scoped))
  }
)
