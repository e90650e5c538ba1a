/**
 * A folder as a tar stream both ways (GET/PUT .../files/archive) and PUT /files's `mode`,
 * `parents` and full disk, through the public API against a real agent and a real busybox
 * sandbox (issue 28): uploads of tar and tar.gz (a new folder, a merge into an existing one),
 * downloads read back; every refusal of the contract (`..`, an absolute name, through a symlink
 * of the archive or of the folder, hard links out, device nodes, not a tar, a cut gzip or tar)
 * is 400 with nothing written; a full disk is 507 with nothing left under the name.
 */
import { expect, layer } from "@effect/vitest"
import { tar, type TarEntry, untar } from "@svc/testing/Tar"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import * as Zlib from "node:zlib"
// The SDK is not a dependency of the API: its source, as its own tests reach the API's harness.
import { Svc } from "../../../../packages/sdk/src/index.ts"
import { api, create, Env, EnvLayer, expectError, waitState } from "../../testing/SandboxesEnv.ts"

const exec = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd: ["sh", "-c", script] } }), (res) => {
    expect(res.status, res.text).toBe(200)
    return res.json as { exit_code: number; stdout: string; stderr: string }
  })

const q = encodeURIComponent

const putArchive = (id: string, path: string, body: Uint8Array, type = "application/x-tar") =>
  api("PUT", `/v1/sandboxes/${id}/files/archive?path=${q(path)}`, { raw: body, headers: { "content-type": type } })

const tree: ReadonlyArray<TarEntry> = [
  { name: "./", type: "5", mode: 0o750 },
  { name: "dir/", type: "5" },
  { name: "dir/a.txt", data: "alpha\n", mode: 0o600 },
  { name: "dir/sub/b.bin", data: new Uint8Array(70_000).fill(7) },
  { name: "link", type: "2", link: "dir/a.txt" },
  { name: "abs", type: "2", link: "/etc/hostname" },
  { name: "hard", type: "1", link: "dir/a.txt" },
  { name: "pipe", type: "6" }
]

layer(EnvLayer, { excludeTestServices: true, timeout: 240_000 })("sandbox folders as tar streams", (it) => {
  it.effect("a tar and a tar.gz go up (a new folder, a merge) and come down; PUT /files takes mode and parents", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local", ram_mb: 256 })
      yield* waitState(s.id, "running")

      // A new folder, made with its parents: every entry, links as links.
      const up = yield* putArchive(s.id, "/srv/new/up", tar(tree))
      expect(up.status, up.text).toBe(204)
      expect(
        (yield* exec(
          s.id,
          "cd /srv/new/up && stat -c '%a' . dir/a.txt && cat dir/a.txt && stat -c %s dir/sub/b.bin && " +
            "readlink link && readlink abs && stat -c '%h %F' hard pipe && ls -A /srv/new"
        )).stdout
      ).toBe("750\n600\nalpha\n70000\ndir/a.txt\n/etc/hostname\n2 regular file\n1 fifo\nup\n")

      // A tar.gz merges into the existing folder: a file replaced, one added, the rest kept.
      const gz = Zlib.gzipSync(tar([{ name: "dir/a.txt", data: "beta\n" }, { name: "dir/c.txt", data: "gamma\n" }]))
      const merged = yield* putArchive(s.id, "/srv/new/up", gz, "application/gzip")
      expect(merged.status, merged.text).toBe(204)
      expect((yield* exec(s.id, "cd /srv/new/up && cat dir/a.txt dir/c.txt && ls -A . dir")).stdout).toBe(
        "beta\ngamma\n.:\nabs\ndir\nhard\nlink\npipe\n\ndir:\na.txt\nc.txt\nsub\n"
      )

      // Down: the folder as a tar, and as a tar.gz.
      const down = yield* api("GET", `/v1/sandboxes/${s.id}/files/archive?path=${q("/srv/new/up")}`)
      expect(down.status, down.text).toBe(200)
      expect(down.headers.get("content-type")).toContain("application/x-tar")
      const entries = untar(down.bytes)
      const byName = new Map(entries.map((e) => [e.name.replace(/^\.\//, "").replace(/\/$/, ""), e]))
      expect(byName.get("dir/c.txt")?.data.toString()).toBe("gamma\n")
      expect(byName.get("dir/sub/b.bin")?.data.length).toBe(70_000)
      expect(byName.get("link")).toMatchObject({ type: "2", link: "dir/a.txt" })
      expect(byName.get("pipe")?.type).toBe("6")
      const zipped = yield* api("GET", `/v1/sandboxes/${s.id}/files/archive?path=${q("/srv/new/up")}&format=tar.gz`)
      expect(zipped.status).toBe(200)
      expect(zipped.headers.get("content-type")).toContain("application/gzip")
      const names = untar(Zlib.gunzipSync(zipped.bytes)).map((e) => e.name).sort()
      expect(names).toEqual(entries.map((e) => e.name).sort())
      // `/` leaves /proc and /sys out (what a read key must not read), and stands on its own.
      const root = yield* api("GET", `/v1/sandboxes/${s.id}/files/archive?path=/&format=tar.gz`)
      expect(root.status).toBe(200)
      const rootNames = untar(Zlib.gunzipSync(root.bytes)).map((e) => e.name)
      expect(rootNames).toContain("./srv/new/up/dir/c.txt")
      expect(rootNames.some((n) => /^\.\/(proc|sys)(\/|$)/.test(n))).toBe(false)

      // Refusals of the download: a missing path, a file, /proc, a bad format.
      const get = (path: string, extra = "") =>
        api("GET", `/v1/sandboxes/${s.id}/files/archive?path=${q(path)}${extra}`)
      expectError(yield* get("/srv/none"), 404, "not_found")
      expectError(yield* get("/srv/new/up/dir/a.txt"), 400, "invalid_request")
      expectError(yield* get("/proc/1"), 400, "invalid_request")
      expectError(yield* get("/srv", "&format=zip"), 400, "invalid_request")

      // PUT /files: mode, parents=false (a missing folder is 404), the default makes folders.
      const file = (path: string, extra: string) =>
        api("PUT", `/v1/sandboxes/${s.id}/files?path=${q(path)}${extra}`, {
          raw: Buffer.from("x"),
          headers: { "content-type": "application/octet-stream" }
        })
      expect((yield* file("/srv/m/f.sh", "&mode=0750")).status).toBe(204)
      expect((yield* exec(s.id, "stat -c %a /srv/m/f.sh")).stdout).toBe("750\n")
      expectError(yield* file("/srv/none/f", "&parents=false"), 404, "not_found")
      expect((yield* exec(s.id, "ls -d /srv/none 2>&1; true")).stdout).toContain("No such file")
      expectError(yield* file("/srv/m/g", "&mode=999"), 400, "invalid_request")
      expect((yield* file("/srv/m/deep/er/g", "&parents=true")).status).toBe(204)

      // The SDK: a local folder up (streamed as a tar), down into another, watched.
      const env = yield* Env
      const sandbox = yield* Effect.promise(() =>
        new Svc({ baseUrl: env.base, apiKey: env.org.token }).sandboxes.get(s.id)
      )
      const local = Fs.mkdtempSync(NodePath.join(Os.tmpdir(), "svc-upload-"))
      const back = Fs.mkdtempSync(NodePath.join(Os.tmpdir(), "svc-download-"))
      try {
        Fs.mkdirSync(NodePath.join(local, "src", "deep"), { recursive: true })
        Fs.writeFileSync(NodePath.join(local, "src", "deep", "main.ts"), "export {}\n")
        Fs.writeFileSync(NodePath.join(local, `${"n".repeat(150)}.txt`), "a long name\n")
        Fs.writeFileSync(NodePath.join(local, "data.bin"), Buffer.alloc(300_000, 3))
        Fs.symlinkSync("src/deep/main.ts", NodePath.join(local, "main"))
        yield* Effect.promise(() => sandbox.files.upload(local, "/srv/sdk"))
        expect(
          (yield* exec(s.id, "cat /srv/sdk/src/deep/main.ts && readlink /srv/sdk/main && stat -c %s /srv/sdk/data.bin"))
            .stdout
        )
          .toBe("export {}\nsrc/deep/main.ts\n300000\n")
        const count = yield* Effect.promise(() => sandbox.files.download("/srv/sdk", back))
        expect(count).toBeGreaterThanOrEqual(6)
        expect(Fs.readFileSync(NodePath.join(back, "src", "deep", "main.ts"), "utf8")).toBe("export {}\n")
        expect(Fs.readFileSync(NodePath.join(back, `${"n".repeat(150)}.txt`), "utf8")).toBe("a long name\n")
        expect(Fs.statSync(NodePath.join(back, "data.bin")).size).toBe(300_000)
        expect(Fs.readlinkSync(NodePath.join(back, "main"))).toBe("src/deep/main.ts")
        const stream = yield* Effect.promise(() => sandbox.files.download("/srv/sdk"))
        expect(untar(new Uint8Array(yield* Effect.promise(() => new Response(stream).arrayBuffer()))).length)
          .toBe(count)
        const seen = yield* Effect.promise(async () => {
          const controller = new AbortController()
          const iterator = sandbox.files.watch("/srv/sdk", { signal: controller.signal })[Symbol.asyncIterator]()
          const first = iterator.next()
          await new Promise((r) => setTimeout(r, 1500))
          await sandbox.exec(["touch", "/srv/sdk/new.txt"])
          const event = await first
          controller.abort()
          return event.value
        })
        expect(seen).toEqual({ type: "create", path: "/srv/sdk/new.txt", is_dir: false })
      } finally {
        Fs.rmSync(local, { recursive: true, force: true })
        Fs.rmSync(back, { recursive: true, force: true })
      }
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    }))

  it.effect("every hostile archive is 400 with nothing written; a full disk is 507 with nothing left under the name", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local", ram_mb: 128, disk_gb: 1 })
      yield* waitState(s.id, "running")
      yield* exec(s.id, "mkdir -p /srv/ex && ln -s /etc /srv/ex/out && echo keep > /srv/ex/kept")

      const cases: ReadonlyArray<readonly [string, Uint8Array, string?, ReadonlyArray<string>?]> = [
        ["..", tar([{ name: "ok.txt", data: "x" }, { name: "../evil", data: "x" }])],
        ["inner ..", tar([{ name: "a/../../evil", data: "x" }])],
        ["an absolute name", tar([{ name: "/etc/evil", data: "x" }])],
        [
          "through a symlink of the archive",
          tar([{ name: "l", type: "2", link: "/etc" }, { name: "l/evil", data: "x" }])
        ],
        [
          "a folder replaced by a symlink",
          tar([{ name: "d/", type: "5" }, { name: "d", type: "2", link: "/etc" }, { name: "d/evil", data: "x" }])
        ],
        ["a hard link out with ..", tar([{ name: "h", type: "1", link: "../../etc/passwd" }])],
        ["a hard link to an absolute path", tar([{ name: "h", type: "1", link: "/etc/passwd" }])],
        [
          "a hard link through a symlink",
          tar([{ name: "l", type: "2", link: "/etc" }, { name: "h", type: "1", link: "l/passwd" }])
        ],
        ["a char device", tar([{ name: "ok.txt", data: "x" }, { name: "null", type: "3" }])],
        ["a block device", tar([{ name: "sda", type: "4" }])],
        ["not a tar", Buffer.from("this is not a tar archive at all ".repeat(40))],
        ["an empty body", Buffer.alloc(0)],
        ["a tar cut inside an entry", tar([{ name: "big", data: new Uint8Array(8192) }]).subarray(0, 3000)],
        [
          "a cut gzip",
          Zlib.gzipSync(tar([{ name: "f", data: new Uint8Array(100_000).map((_, i) => i % 251) }])).subarray(0, 500),
          "application/gzip"
        ],
        ["a gzip that is not one", Buffer.from("not gzip at all"), "application/gzip"],
        // The folder's own link: `out` is a link to /etc in the sandbox.
        [
          "through a symlink of the folder",
          tar([{ name: "new.txt", data: "x" }, { name: "out/", type: "5" }, { name: "out/evil", data: "x" }]),
          "application/x-tar",
          ["/srv/ex"]
        ]
      ]
      for (const [what, body, type, targets] of cases) {
        for (const target of targets ?? ["/srv/fresh", "/srv/ex"]) {
          const res = yield* putArchive(s.id, target, body, type)
          expect(res.status, `${what} into ${target}: ${res.text}`).toBe(400)
          expect(res.json.code).toBe("invalid_request")
        }
      }
      // Nothing written anywhere: no new folder, no staging left, /etc untouched.
      expect(
        (yield* exec(s.id, "ls -A /srv /srv/ex; ls /etc/evil /evil /srv/evil 2>&1 | grep -c 'No such'")).stdout
      ).toBe("/srv:\nex\n\n/srv/ex:\nkept\nout\n3\n")

      expectError(
        yield* putArchive(s.id, "/srv/t", tar([{ name: "f", data: "x" }]), "text/plain"),
        415,
        "unsupported_media_type"
      )
      expectError(yield* putArchive(s.id, "/proc/x", tar([{ name: "f", data: "x" }])), 400, "invalid_request")
      expectError(yield* putArchive(s.id, "/srv/ex/kept", tar([{ name: "f", data: "x" }])), 400, "invalid_request")

      // A full disk: 507, and nothing of the upload under the name (nor a temp or staging entry).
      yield* exec(
        s.id,
        "avail=$(df -k / | awk 'NR==2 {print $4}'); fallocate -l $(( (avail - 1024) * 1024 )) /fill"
      )
      const big = new Uint8Array(6 * 1024 * 1024).fill(1)
      const full = yield* putArchive(s.id, "/srv/full", tar([{ name: "a", data: "a" }, { name: "big", data: big }]))
      expectError(full, 507, "insufficient_storage")
      const file = yield* api("PUT", `/v1/sandboxes/${s.id}/files?path=/srv/full.bin`, {
        raw: big,
        headers: { "content-type": "application/octet-stream" }
      })
      expectError(file, 507, "insufficient_storage")
      expect((yield* exec(s.id, "ls -A /srv")).stdout).toBe("ex\n")
      // Room again: the same upload goes through.
      yield* exec(s.id, "rm /fill")
      expect((yield* putArchive(s.id, "/srv/full", tar([{ name: "big", data: big }]))).status).toBe(204)
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    }))
})
