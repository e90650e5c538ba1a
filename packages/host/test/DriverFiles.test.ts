/**
 * The file API (`src/Driver/Files.ts`): contained in the sandbox root, refusals by reason,
 * transfers as streams.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { createHash } from "node:crypto"
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

      yield* driver.exec(
        id,
        sh(
          "ln -s /etc/passwd /root/abs-link; ln -s ../../../../../../../etc/shadow /root/rel-link; ln -s ../../.. /root/up; ln -s /proc/1/root /root/init-root"
        )
      )
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
      assert.deepStrictEqual(odd.map((e) => [e.name, e.type, e.size]), [[".hidden", "file", 1], [
        "new\nline",
        "file",
        3
      ], ["with space", "file", 0]])
      assert.strictEqual(
        text((yield* driver.exec(id, exec(["stat", "-c", "%a", "/srv/odd/new\nline"]))).stdout),
        "755\n"
      )
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

  it.effect("transfers stream both ways; a body that fails or runs over leaves the old file and no leftovers; kernel refusals name the errno", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("stream")
      yield* withSandbox(driver, spec(id))
      const CHUNK = 64 * 1024
      const chunk = (i: number) => new Uint8Array(CHUNK).fill(i & 255)
      const body = (count: number) => Stream.range(0, count - 1).pipe(Stream.map(chunk))
      const expected = createHash("sha1")
      for (let i = 0; i < 320; i++) expected.update(chunk(i))
      const sha1 = expected.digest("hex")
      const readBack = (path: string) =>
        Effect.scoped(Effect.gen(function*() {
          const content = yield* driver.readFileStream(id, path)
          const hash = createHash("sha1")
          let bytes = 0
          yield* Stream.runForEach(content.stream, (c) => Effect.sync(() => (hash.update(c), bytes += c.length)))
          return { size: content.size, bytes, sha1: hash.digest("hex") }
        }))

      // 20 MiB in 64 KiB chunks, read back as a stream with its size.
      yield* driver.writeFileStream(id, "/srv/big.bin", body(320))
      assert.deepStrictEqual(yield* readBack("/srv/big.bin"), { size: 320 * CHUNK, bytes: 320 * CHUNK, sha1 })

      // A body that fails half-way, and one over the limit: the old file stays, nothing else.
      const cut = yield* Effect.flip(
        driver.writeFileStream(id, "/srv/big.bin", Stream.concat(body(10), Stream.fail("client went away")))
      )
      assert.strictEqual(cut, "client went away")
      const over = yield* Effect.flip(driver.writeFileStream(id, "/srv/big.bin", body(20), { maxBytes: 10 * CHUNK }))
      assert.strictEqual(over._tag === "SandboxFileError" ? over.reason : over._tag, "too_large")
      assert.strictEqual(text((yield* driver.exec(id, exec(["ls", "-A", "/srv"]))).stdout), "big.bin\n")
      assert.strictEqual((yield* readBack("/srv/big.bin")).sha1, sha1)

      const refusal = <A>(effect: Effect.Effect<A, { _tag: string }>) =>
        Effect.flip(effect).pipe(
          Effect.map((e) => [(e as { reason?: string }).reason ?? e._tag, (e as { errno?: string }).errno])
        )
      const bytes = new TextEncoder().encode("x")
      assert.deepStrictEqual(yield* refusal(driver.writeFile(id, "/dev/full", bytes)), ["refused", "ENOSPC"])
      assert.deepStrictEqual(yield* refusal(driver.writeFile(id, "/dev/.svc/x", bytes)), ["refused", "EROFS"])
      // /proc and /sys: refused by every operation, however the path reaches them (links made
      // inside included), before anything is read or written.
      yield* driver.exec(
        id,
        sh(
          "ln -s /proc /root/p; ln -s ../proc /root/rel; ln -s /root/p /root/chain; ln -s loop2 /root/loop1; ln -s loop1 /root/loop2"
        )
      )
      for (
        const path of [
          "/proc/self/environ",
          "//proc/1/environ",
          "/sys",
          "/root/p/1/environ",
          "/root/rel/self/status",
          "/root/chain/sys/kernel/hostname",
          "/root/p/1/root/etc/passwd"
        ]
      ) {
        assert.deepStrictEqual(yield* refusal(driver.readFile(id, path)), ["kernel_interface", undefined], path)
        assert.deepStrictEqual(yield* refusal(driver.stat(id, path)), ["kernel_interface", undefined], path)
        assert.deepStrictEqual(yield* refusal(driver.writeFile(id, path, bytes)), ["kernel_interface", undefined], path)
      }
      assert.deepStrictEqual(yield* refusal(driver.listDir(id, "/root/p")), ["kernel_interface", undefined])
      assert.deepStrictEqual(yield* refusal(driver.readFile(id, "/root/loop1")), ["refused", "ELOOP"])
    }))
})
