/**
 * What the agent keeps of a sandbox's background-process output is bounded per sandbox and
 * released when the sandbox is deleted (issue 25, item 11): the attack that found it started 64
 * running and 100 exited processes, each writing 2 MiB, in one sandbox (+289 MB of agent
 * memory, still there after the delete). `outputBytesKept` counts the bytes the driver keeps.
 */
import { assert, layer } from "@effect/vitest"
import { eventually } from "@svc/testing/Eventually"
import { Effect, Stream } from "effect"
import type { ProcessEvent } from "../src/Driver.ts"
import { KEEP_BYTES, KEEP_BYTES_PER_SANDBOX, MAX_EXITED, outputBytesKept } from "../src/Driver/Processes.ts"
import { sh, spec, TestDriver, text, uniqueId } from "./fixtures/support.ts"

const MIB = 1024 * 1024

/** Writes 2 MiB to each stream (more than a stream keeps), then exits or sleeps. */
const noisy = (
  then: "exit" | "sleep"
) => [
  "sh",
  "-c",
  `head -c ${2 * MIB} /dev/zero; head -c ${2 * MIB} /dev/zero >&2; ${
    then === "exit" ? "exit 0" : "touch /tmp/done.$$; sleep 1000"
  }`
]

const bytesOf = (events: ReadonlyArray<ProcessEvent>, stream: "stdout" | "stderr") =>
  events.reduce((n, e) => n + (e._tag === "Output" && e.stream === stream ? e.bytes.length : 0), 0)

layer(TestDriver.layer(), { excludeTestServices: true, timeout: 300_000 })("background process output", (it) => {
  it.effect(
    "40 exited and 20 running noisy processes keep at most KEEP_BYTES_PER_SANDBOX of output, exited ones going first; a delete releases all of it",
    () =>
      Effect.gen(function*() {
        const { driver } = yield* TestDriver
        const id = uniqueId("output")
        /** Follows a process's output to its end; one already dropped is done too. */
        const drained = (sandboxId: string, pid: number) =>
          Effect.flatMap(driver.processOutput(sandboxId, pid, true), Stream.runDrain).pipe(
            Effect.catchTag("ProcessRefused", (e) => e.reason === "not_found" ? Effect.void : Effect.fail(e))
          )
        const before = outputBytesKept()
        yield* driver.create(spec(id))
        yield* Effect.addFinalizer(() => driver.destroy(id).pipe(Effect.ignore))

        const exited = yield* Effect.forEach(
          Array.from({ length: 40 }),
          () => driver.startProcess(id, { cmd: noisy("exit"), stdin: false }),
          { concurrency: 4 }
        )
        // Each has ended (its output read whole by the agent), or was dropped for the bound already.
        yield* Effect.forEach(exited, (p) => drained(id, p.pid), { concurrency: 4, discard: true })
        const running = yield* Effect.forEach(
          Array.from({ length: 20 }),
          () => driver.startProcess(id, { cmd: noisy("sleep"), stdin: false }),
          { concurrency: 4 }
        )
        // The running ones have written all they will (4 MiB each, all but a pipe's worth read
        // by the agent); the bound holds all along, this is where it is full.
        yield* eventually(
          Effect.map(driver.exec(id, sh("ls /tmp | grep -c '^done\\.' || true")), (r) => text(r.stdout).trim()),
          (n) => n === "20",
          "60 seconds",
          "200 millis"
        )
        const last = running[running.length - 1]!
        const held = outputBytesKept(id)
        assert.isAtMost(held, KEEP_BYTES_PER_SANDBOX)
        // Without the per-sandbox bound: 60 processes x 2 MiB.
        assert.isAtLeast(held, KEEP_BYTES_PER_SANDBOX - 2 * 64 * 1024)
        // Exited processes went first: none of them is kept while running ones lost bytes.
        const listed = yield* driver.processes(id)
        assert.strictEqual(listed.filter((p) => p.state === "exited").length, 0)
        assert.strictEqual(listed.filter((p) => p.state === "running").length, 20)
        // The newest running one still has the last of each of its streams.
        const tail = yield* Stream.runCollect(yield* driver.processOutput(id, last.pid, false))
        assert.isAbove(bytesOf(tail, "stderr"), 0)
        assert.isAtMost(bytesOf(tail, "stderr"), KEEP_BYTES)

        // Exited ones alone: at most MAX_EXITED are kept, each with its last 1 MiB per stream.
        yield* Effect.forEach(running, (p) => driver.signalProcess(id, p.pid, "KILL"), { discard: true })
        const fresh = yield* Effect.forEach(
          Array.from({ length: MAX_EXITED + 4 }),
          () => driver.startProcess(id, { cmd: ["sh", "-c", "echo one line"], stdin: false }),
          { concurrency: 4 }
        )
        yield* Effect.forEach(fresh, (p) => drained(id, p.pid), { discard: true })
        yield* driver.startProcess(id, { cmd: ["true"], stdin: false })
        const after = yield* driver.processes(id)
        assert.isAtMost(after.length, MAX_EXITED + 1)
        assert.isAtMost(outputBytesKept(id), KEEP_BYTES_PER_SANDBOX)

        // The delete releases everything the agent kept for the sandbox.
        yield* driver.destroy(id)
        assert.strictEqual(outputBytesKept(id), 0)
        assert.strictEqual(outputBytesKept(), before)
      }),
    240_000
  )
})
