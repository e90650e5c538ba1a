/**
 * The file API and exec results at their edges, through the public API against a real agent
 * and real sandboxes: writes and reads the sandbox's own kernel refuses are 422 `file_refused`
 * with the errno (never a 503 "retry"), an upload cut short or refused leaves the old file and
 * nothing else behind, exec outputs past the host's cap say `truncated`, and no files route
 * reaches /proc or /sys, however the path is spelt or linked (issue 25, item 7).
 */
import { expect, layer } from "@effect/vitest"
import * as TransferMemory from "@svc/host-protocol/TransferMemory"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import * as Http from "node:http"
import { eventually, Identity } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, expectError, waitState } from "../../testing/SandboxesEnv.ts"

const exec = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd: ["sh", "-c", script] } }), (res) => {
    expect(res.status, res.text).toBe(200)
    return res.json as { exit_code: number; stdout: string; stderr: string; truncated: boolean }
  })

const put = (id: string, path: string, body: string | Uint8Array) =>
  api("PUT", `/v1/sandboxes/${id}/files?path=${encodeURIComponent(path)}`, {
    raw: body,
    headers: { "content-type": "application/octet-stream" }
  })

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("sandbox files and exec at their edges", (it) => {
  it.effect("a write the sandbox's kernel refuses is 422 file_refused naming the errno; a file over 100 MiB streams; the sandbox is unharmed", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local", ram_mb: 128 })
      yield* waitState(s.id, "running")

      const refusals: ReadonlyArray<readonly [string, string, string]> = [
        // [method, path, errno]
        ["PUT", "/dev/full", "ENOSPC"],
        // The busybox the platform binds into every sandbox sits on a read-only mount.
        ["PUT", "/dev/.svc/planted", "EROFS"],
        ["PUT", "/dev/.svc/deeper/planted", "EROFS"]
      ]
      for (const [method, path, errno] of refusals) {
        const res = method === "PUT"
          ? yield* put(s.id, path, "written by the file API\n")
          : yield* api("GET", `/v1/sandboxes/${s.id}/files?path=${encodeURIComponent(path)}`)
        expectError(res, 422, "file_refused")
        expect(res.json.errno, `${method} ${path}: ${res.text}`).toBe(errno)
        expect(res.json.error).toContain(errno)
      }

      // A file past one socket buffer and under the size a host splices comes whole: answered
      // plainly on a connection that asked for a splice (whose drain the host forwards itself).
      yield* exec(s.id, "head -c 300000 /dev/zero | tr '\\0' m > /srv/medium.txt")
      const medium = yield* api("GET", `/v1/sandboxes/${s.id}/files?path=/srv/medium.txt`)
      expect(medium.status).toBe(200)
      expect(medium.text).toBe("m".repeat(300_000))

      // Downloads stream with no bound of their own: a file past the old 100 MiB cap is sent whole.
      yield* exec(s.id, "truncate -s 104857601 /srv/over.bin")
      const over = yield* api("GET", `/v1/sandboxes/${s.id}/files?path=/srv/over.bin`)
      expect(over.status).toBe(200)
      expect(over.headers.get("content-length")).toBe("104857601")
      // Moved by the kernel from the host's connection to this one (@svc/hosts/Splice), which closes after it.
      expect(over.headers.get("connection")).toBe("close")
      expect(over.bytes.length).toBe(104857601)

      // Nothing was planted; /dev/full and /dev/null are still the devices they were, modes untouched.
      const check = yield* exec(s.id, "ls -a /dev/.svc; stat -c '%F %a' /dev/full /dev/null")
      expect(check.stdout).toBe(
        ".\n..\nbusybox\nsvc-ctx\nsvc-init\nsvc-watch\ncharacter special file 666\ncharacter special file 666\n"
      )
      // A device written in place keeps its mode.
      expect((yield* put(s.id, "/dev/null", "discarded")).status).toBe(204)
      expect((yield* exec(s.id, "stat -c '%F %a' /dev/null")).stdout).toBe("character special file 666\n")
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    }))

  it.effect("a file of declared length goes up and down by the kernel, byte for byte; the connection closes after each; a client that expects 100-continue gets it", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local", ram_mb: 128 })
      yield* waitState(s.id, "running")
      // Every 4 KiB differs: a block out of place changes the hash.
      const bytes = new Uint8Array(5 * 1024 * 1024 + 123)
      const view = new DataView(bytes.buffer)
      for (let i = 0; i + 4 <= bytes.length; i += 4096) view.setUint32(i, (i * 2654435761) >>> 0)
      const sha = (data: Uint8Array) => createHash("sha256").update(data).digest("hex")

      const up = yield* put(s.id, "/srv/spliced.bin", bytes)
      expect(up.status, up.text).toBe(204)
      // Spliced from this connection to the host's (@svc/hosts/Splice), which Node's parser no longer reads.
      expect(up.headers.get("connection")).toBe("close")
      expect((yield* exec(s.id, "wc -c < /srv/spliced.bin")).stdout.trim()).toBe(String(bytes.length))

      // A client that waits to be told to send its body (curl does past 1 MiB) is told once the host takes it.
      const env = yield* Env
      const url = new URL(env.base)
      for (const size of [100, bytes.length]) {
        const waited = yield* Effect.callback<number>((resume) => {
          const req = Http.request({
            host: url.hostname,
            port: Number(url.port),
            method: "PUT",
            path: `/v1/sandboxes/${s.id}/files?path=/srv/continued.bin`,
            headers: { authorization: `Bearer ${env.org.token}`, "content-length": size, expect: "100-continue" }
          }, (res) => {
            res.resume()
            res.on("end", () => resume(Effect.succeed(res.statusCode ?? 0)))
          })
          req.on("error", (e) => resume(Effect.die(e)))
          req.on("continue", () => req.end(bytes.subarray(0, size)))
        }).pipe(Effect.timeout("20 seconds"))
        expect(waited).toBe(204)
        expect((yield* exec(s.id, "wc -c < /srv/continued.bin")).stdout.trim()).toBe(String(size))
      }

      const down = yield* api("GET", `/v1/sandboxes/${s.id}/files?path=/srv/spliced.bin`)
      expect(down.status).toBe(200)
      expect(down.headers.get("connection")).toBe("close")
      expect(down.bytes.length).toBe(bytes.length)
      expect(sha(down.bytes)).toBe(sha(bytes))
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    }))

  it.effect("a replaced file changes only once the whole upload arrived: a cut upload or a refusal leaves the old file and no leftovers", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const s = yield* create({ region: "local", ram_mb: 128 })
      yield* waitState(s.id, "running")
      expect((yield* put(s.id, "/srv/data/kept.txt", "the old content")).status).toBe(204)

      // 2 MiB of a declared 8 MiB, then the client goes away.
      const url = new URL(env.base)
      yield* Effect.callback<void>((resume) => {
        const req = Http.request({
          host: url.hostname,
          port: Number(url.port),
          method: "PUT",
          path: `/v1/sandboxes/${s.id}/files?path=/srv/data/kept.txt`,
          headers: { authorization: `Bearer ${env.org.token}`, "content-length": 8 * 1024 * 1024 }
        })
        req.on("error", () => resume(Effect.void))
        req.on("close", () => resume(Effect.void))
        req.write(Buffer.alloc(2 * 1024 * 1024, 0x61), () => setTimeout(() => req.destroy(), 300))
      })
      // The host notices the cut and cleans up behind it.
      const listing = yield* Effect.gen(function*() {
        for (let attempt = 0; attempt < 50; attempt++) {
          const ls = yield* exec(s.id, "ls -A /srv/data")
          if (ls.stdout === "kept.txt\n") return ls.stdout
          yield* Effect.sleep("100 millis")
        }
        return (yield* exec(s.id, "ls -A /srv/data")).stdout
      })
      expect(listing).toBe("kept.txt\n")
      expect((yield* api("GET", `/v1/sandboxes/${s.id}/files?path=/srv/data/kept.txt`)).text).toBe("the old content")

      // A path through a file, or naming a folder, is refused before a byte is taken (the
      // host answers while the body is still coming).
      const eightMiB = new Uint8Array(8 * 1024 * 1024)
      expectError(yield* put(s.id, "/srv/data/kept.txt/child", eightMiB), 400, "invalid_request")
      expectError(yield* put(s.id, "/srv/data/", eightMiB), 400, "invalid_request")
      expect((yield* exec(s.id, "ls -A /srv/data")).stdout).toBe("kept.txt\n")

      // A body without a declared length that runs past the old 100 MiB cap: streamed to the
      // sandbox's disk whole (its disk is the only bound).
      const pastOldCap = yield* Effect.callback<{ status: number; body: string }>((resume) => {
        const req = Http.request({
          host: url.hostname,
          port: Number(url.port),
          method: "PUT",
          path: `/v1/sandboxes/${s.id}/files?path=/srv/big.bin`,
          headers: { authorization: `Bearer ${env.org.token}`, "transfer-encoding": "chunked" }
        }, (res) => {
          let body = ""
          res.on("data", (c: Buffer) => (body += c.toString("utf8")))
          res.on("end", () => resume(Effect.succeed({ status: res.statusCode ?? 0, body })))
        })
        req.on("error", () => undefined)
        const chunk = Buffer.alloc(1024 * 1024, 0x62)
        let sent = 0
        const write = () => {
          while (sent <= 100) {
            sent++
            if (!req.write(chunk)) return void req.once("drain", write)
          }
          req.end()
        }
        write()
      })
      expect(pastOldCap.status, pastOldCap.body).toBe(204)
      expect((yield* exec(s.id, "stat -c %s /srv/big.bin && rm /srv/big.bin")).stdout).toBe(`${101 * 1024 * 1024}\n`)
      expect((yield* exec(s.id, "ls -A /srv/data")).stdout).toBe("kept.txt\n")
      expect((yield* api("GET", `/v1/sandboxes/${s.id}/files?path=/srv/data/kept.txt`)).text).toBe("the old content")

      // A complete upload replaces it; links are followed to their target inside the sandbox.
      yield* exec(s.id, "ln -s /srv/data/kept.txt /srv/link")
      expect((yield* put(s.id, "/srv/link", "the new content")).status).toBe(204)
      expect((yield* api("GET", `/v1/sandboxes/${s.id}/files?path=/srv/data/kept.txt`)).text).toBe("the new content")
      expect((yield* exec(s.id, "ls -A /srv/data; stat -c %F /srv/link")).stdout).toBe("kept.txt\nsymbolic link\n")

      // Every transfer above has ended for the API's and the agent's collections (one process
      // here, TransferMemory.ts), the cut and the refused ones included: their check runs no more.
      yield* eventually(Effect.sync(TransferMemory.inFlightCount), (n) => n === 0, "10 seconds")
      expect(TransferMemory.active()).toBe(false)
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    }))

  it.effect("a read-only key reads no process's environ: /proc and /sys are 400 on every files route, however spelt, and through links made inside", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const identity = yield* Identity
      const readOnly = yield* identity.key(env.org.id, ["sandboxes:read"])
      const s = yield* create({ region: "local", ram_mb: 128 })
      yield* waitState(s.id, "running")
      // A process of the sandbox holding a credential in its environment, as an injected key would.
      const secret = `svc_live_${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`
      const started = yield* api("POST", `/v1/sandboxes/${s.id}/exec`, {
        body: { cmd: ["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], env: { SVC_API_KEY: secret } }
      })
      expect(started.status, started.text).toBe(200)
      const pid = started.json.stdout.trim() as string
      expect(pid).toMatch(/^\d+$/)
      // The links a tenant (or anything running inside) can make.
      yield* exec(
        s.id,
        `ln -s /proc /tmp/p; ln -s ../proc /tmp/rel; ln -s /proc/${pid}/environ /tmp/e; mkdir -p /tmp/d; ` +
          "ln -s ../../proc /tmp/d/up; ln -s /tmp/p /tmp/chain; ln -s / /tmp/root"
      )
      const read = (path: string, token = readOnly) =>
        api("GET", `/v1/sandboxes/${s.id}/files?path=${encodeURIComponent(path)}`, { token })
      const paths = [
        `/proc/${pid}/environ`,
        `//proc/${pid}/environ`,
        `/./proc/${pid}/environ`,
        `/proc/./${pid}/environ`,
        `/x/../proc/${pid}/environ`,
        "/proc",
        "/proc/",
        "//proc//",
        "/sys",
        "/sys/kernel",
        `/tmp/p/${pid}/environ`,
        `/tmp/rel/${pid}/environ`,
        "/tmp/e",
        `/tmp/d/up/${pid}/environ`,
        `/tmp/chain/${pid}/environ`,
        `/tmp/root/proc/${pid}/environ`,
        "/tmp/p",
        "/tmp/p/",
        `/tmp/p/${pid}/root/etc/passwd`
      ]
      const seen: Array<string> = []
      for (const path of paths) {
        const res = yield* read(path)
        expect(res.text, path).not.toContain(secret)
        seen.push(`${path}: ${res.status} ${res.json?.code}`)
      }
      expect(seen).toEqual(paths.map((path) => `${path}: 400 invalid_request`))
      // A full key is refused the same way; writes too, the link's target untouched.
      expectError(yield* read(`/tmp/p/${pid}/environ`, env.org.token), 400, "invalid_request")
      expectError(yield* put(s.id, `/proc/${pid}/oom_score_adj`, "1000"), 400, "invalid_request")
      expectError(yield* put(s.id, `/tmp/p/${pid}/oom_score_adj`, "1000"), 400, "invalid_request")
      expectError(yield* put(s.id, "/tmp/chain/sys/kernel/hostname", "x"), 400, "invalid_request")
      expect((yield* exec(s.id, `cat /proc/${pid}/oom_score_adj`)).stdout).toBe("0\n")
      // Files next to the links are still the sandbox's to read and write.
      expect((yield* put(s.id, "/tmp/root/srv/kept.txt", "kept")).status).toBe(204)
      expect((yield* read("/srv/kept.txt")).text).toBe("kept")
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    }))

  it.effect("exec outputs past the host's 1 MiB cap are cut and say truncated", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local", ram_mb: 128 })
      yield* waitState(s.id, "running")
      const small = yield* exec(s.id, "echo hi; echo there >&2")
      expect(small).toMatchObject({ exit_code: 0, stdout: "hi\n", stderr: "there\n", truncated: false })
      const big = yield* exec(s.id, "head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2")
      expect(big.exit_code).toBe(0)
      expect(big.truncated).toBe(true)
      expect(big.stdout.length).toBe(1024 * 1024)
      expect(big.stderr).toBe("done\n")
      const bigErr = yield* exec(s.id, "head -c 2000000 /dev/zero | tr '\\0' b >&2")
      expect(bigErr.truncated).toBe(true)
      expect(bigErr.stderr.length).toBe(1024 * 1024)
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    }))
})
