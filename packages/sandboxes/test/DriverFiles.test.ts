/** The file API (`src/Driver/Files.ts`): contained in the sandbox root, refusals by reason. */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as FsSync from "node:fs"
import { exec, sh, spec, TestDriver, text, uniqueId, withSandbox } from "./fixtures/support.ts"

layer(TestDriver.layer(), { excludeTestServices: true })("SandboxDriver file API (bubblewrap)", (it) => {
  it.effect("file API never reaches the host's files", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("files")
      yield* withSandbox(driver, spec(id))
      const sandboxPasswd = text(yield* driver.readFile(id, "/etc/passwd"))
      const hostPasswd = FsSync.readFileSync("/etc/passwd", "utf8")
      const hostShadow = FsSync.readFileSync("/etc/shadow", "utf8")
      assert.notStrictEqual(sandboxPasswd, hostPasswd)
      assert.include(sandboxPasswd, "root:x:0:0")

      yield* driver.exec(id, sh(
        "ln -s /etc/passwd /root/abs-link; ln -s ../../../../../../../etc/shadow /root/rel-link; ln -s ../../.. /root/up; ln -s /proc/1/root /root/init-root"
      ))
      const attempts = [
        "/../../../../etc/passwd",
        "/etc/../../../etc/shadow",
        "/root/abs-link",
        "/root/rel-link",
        "/root/up/etc/passwd",
        "/root/init-root/etc/passwd",
        "/proc/1/root/etc/passwd",
        "/proc/self/root/etc/shadow"
      ]
      for (const path of attempts) {
        const result = yield* driver.readFile(id, path).pipe(Effect.map(text), Effect.orElseSucceed(() => ""))
        assert.notStrictEqual(result, hostPasswd, path)
        assert.notStrictEqual(result, hostShadow, path)
        if (result !== "") assert.isTrue(result === sandboxPasswd || result.startsWith("root:*:"), `${path}: ${result}`)
      }
      // Writing through a link lands inside the sandbox, never on the host.
      yield* driver.writeFile(id, "/root/up/etc/svc-written-through-link", new TextEncoder().encode("x"))
      assert.isFalse(FsSync.existsSync("/etc/svc-written-through-link"))
      assert.strictEqual(text(yield* driver.readFile(id, "/etc/svc-written-through-link")), "x")

      const reason = <A>(effect: Effect.Effect<A, { _tag: string }>) =>
        Effect.flip(effect).pipe(Effect.map((e) => (e as { reason?: string }).reason ?? e._tag))
      assert.strictEqual(yield* reason(driver.readFile(id, "/nope")), "not_found")
      assert.strictEqual(yield* reason(driver.readFile(id, "/etc")), "is_directory")
      assert.strictEqual(yield* reason(driver.readFile(id, "/dev/zero")), "not_regular_file")
      assert.strictEqual(yield* reason(driver.listDir(id, "/etc/passwd")), "not_directory")
      assert.strictEqual(yield* reason(driver.listDir(id, "/nope")), "not_found")
      assert.strictEqual(yield* reason(driver.stat(id, "/nope")), "not_found")
      assert.strictEqual(yield* reason(driver.writeFile(id, "/etc", new Uint8Array(1))), "is_directory")
      assert.strictEqual(yield* reason(driver.writeFile(id, "/etc/passwd/child", new Uint8Array(1))), "not_directory")
      assert.strictEqual(yield* reason(driver.readFile(id, "/etc/passwd", { maxBytes: 10 })), "too_large")

      // Odd names survive the listing; links are reported as links.
      yield* driver.writeFile(id, "/srv/odd/with space", new Uint8Array(0))
      yield* driver.writeFile(id, "/srv/odd/new\nline", new Uint8Array(3), 0o755)
      yield* driver.writeFile(id, "/srv/odd/.hidden", new Uint8Array(1))
      const odd = yield* driver.listDir(id, "/srv/odd")
      assert.deepStrictEqual(odd.map((e) => [e.name, e.type, e.size]), [[".hidden", "file", 1], ["new\nline", "file", 3], ["with space", "file", 0]])
      assert.strictEqual(text((yield* driver.exec(id, exec(["stat", "-c", "%a", "/srv/odd/new\nline"]))).stdout), "755\n")
      assert.strictEqual((yield* driver.stat(id, "/root/abs-link")).type, "symlink")
      const root = yield* driver.listDir(id, "/root")
      assert.includeMembers(root.map((e) => e.name), ["abs-link", "up"])

      // Binary content of a few MiB round-trips byte for byte.
      const big = new Uint8Array(3 * 1024 * 1024 + 7)
      for (let i = 0; i < big.length; i++) big[i] = (i * 31 + 7) & 255
      yield* driver.writeFile(id, "/tmp/big.bin", big)
      const back = yield* driver.readFile(id, "/tmp/big.bin")
      assert.strictEqual(back.length, big.length)
      assert.isTrue(Buffer.from(back).equals(Buffer.from(big)))
    }))
})
