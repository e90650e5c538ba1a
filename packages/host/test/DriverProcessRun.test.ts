/**
 * `run` (`src/Driver/Process.ts`): a command's output is whole however late the agent reads it.
 * Its end (the spawner's `X`, on the spawner's pipe) and its output (on pipes of its own) reach
 * the agent by different descriptors; an agent whose event loop is slow (a burst of creates)
 * must still answer what the command wrote before it ended, not an empty stdout.
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { run } from "../src/Driver/Process.ts"
import { withSpawner } from "./fixtures/support.ts"

/** Keeps the event loop busy: every turn spends `ms` of CPU in its check phase, as a loaded agent does. */
const busyLoop = (ms: number) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      let on = true
      const spin = () => {
        if (!on) return
        const until = performance.now() + ms
        while (performance.now() < until) {
          // Busy: the loop's other phases wait.
        }
        setImmediate(spin)
      }
      setImmediate(spin)
      return () => {
        on = false
      }
    }),
    (stop) => Effect.sync(stop)
  )

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8")

it.live(
  "output written just before the end is kept when the agent's event loop is slow",
  () =>
    Effect.scoped(Effect.gen(function*() {
      yield* withSpawner
      yield* busyLoop(45)
      const results = yield* Effect.forEach(
        Array.from({ length: 40 }, (_, i) => i),
        (i) => run("test", "/bin/sh", ["-c", `echo out-${i}; echo err-${i} >&2`], { timeoutMs: 30_000 }),
        { concurrency: 8 }
      )
      const lost = results.flatMap((r, i) =>
        r.exitCode === 0 && text(r.stdout) === `out-${i}\n` && text(r.stderr) === `err-${i}\n`
          ? []
          : [
            `#${i}: exit ${r.exitCode}, stdout ${JSON.stringify(text(r.stdout))}, stderr ${
              JSON.stringify(text(r.stderr))
            }`
          ]
      )
      assert.deepStrictEqual(lost, [])
    })),
  120_000
)

it.live(
  "a background process holding the pipes open does not hold the run; what came before its end is kept",
  () =>
    Effect.scoped(Effect.gen(function*() {
      yield* withSpawner
      yield* busyLoop(45)
      const result = yield* run("test", "/bin/sh", ["-c", "sleep 5 & echo before-end"], { timeoutMs: 30_000 })
      assert.strictEqual(text(result.stdout), "before-end\n")
      assert.strictEqual(result.exitCode, 0)
      assert.isFalse(result.timedOut)
      assert.isBelow(result.durationMs, 4_000, "answered at the shell's end, not the background sleep's")
    })),
  120_000
)
