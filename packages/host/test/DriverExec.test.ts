/** `exec` (`src/Driver/Exec.ts`): what a command inside a sandbox gets and how it ends. */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { exec, sh, spec, TestDriver, text, uniqueId, withSandbox } from "./fixtures/support.ts"

layer(TestDriver.layer(), { excludeTestServices: true })("SandboxDriver.exec (bubblewrap)", (it) => {
  it.effect("exec: cwd, env, stdin, exit codes, timeout, output cap", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("exec")
      yield* withSandbox(driver, spec(id, { env: { FROM_SPEC: "spec", SHARED: "spec" } }))

      const cwd = yield* driver.exec(id, exec(["pwd"], { cwd: "/tmp" }))
      assert.strictEqual(text(cwd.stdout), "/tmp\n")
      const missingCwd = yield* driver.exec(id, exec(["pwd"], { cwd: "/no/such/dir" }))
      assert.strictEqual(missingCwd.exitCode, 126)

      const env = yield* driver.exec(
        id,
        sh("echo $FROM_SPEC $SHARED $FROM_EXEC; env | sort", {
          env: { SHARED: "exec", FROM_EXEC: "x y" }
        })
      )
      const [first, ...rest] = text(env.stdout).split("\n")
      assert.strictEqual(first, "spec exec x y")
      // The agent's environment does not leak in.
      assert.isFalse(rest.some((line) => line.startsWith("NODE") || line.startsWith("VITEST")), rest.join(","))

      const stdin = yield* driver.exec(id, exec(["wc", "-c"], { stdin: new Uint8Array(70_000).fill(65) }))
      assert.strictEqual(text(stdin.stdout).trim(), "70000")
      const stdinText = yield* driver.exec(id, exec(["cat"], { stdin: "from stdin" }))
      assert.strictEqual(text(stdinText.stdout), "from stdin")

      const failing = yield* driver.exec(id, sh("echo oops >&2; exit 7"))
      assert.strictEqual(failing.exitCode, 7)
      assert.strictEqual(text(failing.stderr), "oops\n")
      assert.strictEqual((yield* driver.exec(id, exec(["no-such-command"]))).exitCode, 127)
      // An argv starting with "-" is a command name, never an option of the helper shell.
      assert.strictEqual((yield* driver.exec(id, exec(["-x"]))).exitCode, 127)
      const multiline = yield* driver.exec(id, sh("printf '%s|' \"$V\"", { env: { V: "a\nb=c" } }))
      assert.strictEqual(text(multiline.stdout), "a\nb=c|")
      assert.strictEqual((yield* driver.exec(id, sh("kill -9 $$"))).exitCode, 137)

      const slow = yield* driver.exec(id, sh("sleep 30 & sleep 31; echo never", { timeoutMs: 200 }))
      assert.isTrue(slow.timedOut)
      assert.strictEqual(text(slow.stdout), "")
      const ps = yield* driver.exec(id, exec(["ps", "-o", "args"]))
      assert.notInclude(text(ps.stdout), "sleep 3", text(ps.stdout))

      const capped = yield* driver.exec(id, sh("head -c 5000 /dev/zero; echo small >&2", { maxOutputBytes: 1000 }))
      assert.strictEqual(capped.exitCode, 0)
      assert.strictEqual(capped.stdout.length, 1000)
      assert.isTrue(capped.stdoutTruncated)
      assert.isFalse(capped.stderrTruncated)
      assert.strictEqual(text(capped.stderr), "small\n")

      // A background process keeping the pipes open does not hold the exec.
      const background = yield* driver.exec(id, sh("sleep 20 & echo started", { timeoutMs: 10_000 }))
      assert.strictEqual(text(background.stdout), "started\n")
      assert.isFalse(background.timedOut)
    }))
})
