/**
 * File management through the public API against a real agent and one real (busybox) sandbox:
 * stat, mkdir, move and remove, each success and each refusal the contract names (409
 * `conflict`, 404, 400 for /proc and a link into it, an unknown field, `/`), the scopes (a
 * read-only key cannot mkdir, a `sandbox:<id>` key stays in its sandbox), and the SDK's
 * `sandbox.files.stat/mkdir/move/remove` over the same routes (issue 28).
 */
import { expect, layer } from "@effect/vitest"
// The SDK is not a dependency of the API: its source, as its own tests reach the API's harness.
import { Identity } from "@svc/api/testing/Sandboxes"
import { api, create, Env, EnvLayer, expectError, waitState } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"
import { Svc, SvcError } from "../../../../packages/sdk/src/index.ts"

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("sandbox file operations", (it) => {
  it.effect("stat, mkdir, move and remove: each success, each refusal, the scopes and the SDK, on one sandbox", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const identity = yield* Identity
      const s = yield* create({ region: "local", ram_mb: 128 })
      const other = yield* create({ region: "local", ram_mb: 128 })
      yield* waitState(s.id, "running")
      const base = `/v1/sandboxes/${s.id}/files`
      const q = (path: string) => encodeURIComponent(path)
      const sh = (script: string) =>
        Effect.map(api("POST", `/v1/sandboxes/${s.id}/exec`, { body: { cmd: ["sh", "-c", script] } }), (res) => {
          expect(res.status, res.text).toBe(200)
          return res.json.stdout as string
        })
      yield* sh(
        "mkdir -p /srv/full/sub && echo hello > /srv/full/sub/a.txt && printf 12345 > /srv/f.txt && " +
          "chmod 0640 /srv/f.txt && ln -s f.txt /srv/link && ln -s /proc /tmp/p && ln -s /proc/1/environ /tmp/e"
      )

      // stat: a file, a folder, a symlink (not followed), a missing path.
      const file = yield* api("GET", `${base}/stat?path=${q("/srv/f.txt")}`)
      expect(file.status, file.text).toBe(200)
      expect(file.json).toMatchObject({
        name: "f.txt",
        path: "/srv/f.txt",
        type: "file",
        size: 5,
        mode: "0640",
        uid: 0,
        gid: 0,
        target: null
      })
      expect(Date.parse(file.json.mtime)).toBeGreaterThan(Date.now() - 3_600_000)
      const dir = yield* api("GET", `${base}/stat?path=${q("/srv/full/")}`)
      expect(dir.json).toMatchObject({ name: "full", path: "/srv/full", type: "dir", target: null })
      const link = yield* api("GET", `${base}/stat?path=${q("/srv/link")}`)
      expect(link.json).toMatchObject({ name: "link", type: "symlink", target: "f.txt" })
      expectError(yield* api("GET", `${base}/stat?path=${q("/srv/missing")}`), 404, "not_found")

      // mkdir: 201 made (parents by default, the mode asked), 200 already there with parents,
      // 409 without parents or with a file in the way, 404 for a missing parent without parents.
      const made = yield* api("POST", `${base}/mkdir`, { body: { path: "/srv/new/deep", mode: "0700" } })
      expect(made.status, made.text).toBe(201)
      expect(made.json).toMatchObject({ name: "deep", path: "/srv/new/deep", type: "dir", mode: "0700" })
      expect(yield* sh("stat -c '%F %a' /srv/new/deep")).toBe("directory 700\n")
      const again = yield* api("POST", `${base}/mkdir`, { body: { path: "/srv/new/deep" } })
      expect(again.status, again.text).toBe(200)
      expect(again.json.type).toBe("dir")
      expectError(
        yield* api("POST", `${base}/mkdir`, { body: { path: "/srv/new/deep", parents: false } }),
        409,
        "conflict"
      )
      expectError(yield* api("POST", `${base}/mkdir`, { body: { path: "/srv/f.txt" } }), 409, "conflict")
      expectError(
        yield* api("POST", `${base}/mkdir`, { body: { path: "/srv/none/x", parents: false } }),
        404,
        "not_found"
      )

      // move: 200 the stat of `to`; 409 onto an existing entry without overwrite; replaced with it;
      // 404 for a missing source; 400 for a folder into itself.
      yield* sh("echo old > /srv/target.txt")
      const moved = yield* api("POST", `${base}/move`, { body: { from: "/srv/full/sub/a.txt", to: "/srv/b.txt" } })
      expect(moved.status, moved.text).toBe(200)
      expect(moved.json).toMatchObject({ name: "b.txt", path: "/srv/b.txt", type: "file", size: 6 })
      expectError(
        yield* api("POST", `${base}/move`, { body: { from: "/srv/b.txt", to: "/srv/target.txt" } }),
        409,
        "conflict"
      )
      expect(yield* sh("cat /srv/target.txt; test -e /srv/b.txt && echo kept")).toBe("old\nkept\n")
      const over = yield* api("POST", `${base}/move`, {
        body: { from: "/srv/b.txt", to: "/srv/target.txt", overwrite: true }
      })
      expect(over.status, over.text).toBe(200)
      expect(yield* sh("cat /srv/target.txt; test -e /srv/b.txt || echo gone")).toBe("hello\ngone\n")
      expectError(yield* api("POST", `${base}/move`, { body: { from: "/srv/nope", to: "/srv/x" } }), 404, "not_found")
      expectError(
        yield* api("POST", `${base}/move`, { body: { from: "/srv/full", to: "/srv/full/sub/inner" } }),
        400,
        "invalid_request"
      )
      // A symlink moves as a link (its target stays).
      const linkMoved = yield* api("POST", `${base}/move`, { body: { from: "/srv/link", to: "/srv/link2" } })
      expect(linkMoved.json).toMatchObject({ type: "symlink", target: "f.txt" })

      // remove: 204 a file; 409 a folder with entries without recursive; 204 with it; 404 missing;
      // 400 for `/`; a link is removed, not its target.
      expect((yield* api("DELETE", `${base}?path=${q("/srv/target.txt")}`)).status).toBe(204)
      expectError(yield* api("DELETE", `${base}?path=${q("/srv/full")}`), 409, "conflict")
      expectError(yield* api("DELETE", `${base}?path=${q("/srv/full")}&recursive=false`), 409, "conflict")
      expect(yield* sh("test -d /srv/full/sub && echo still")).toBe("still\n")
      expect((yield* api("DELETE", `${base}?path=${q("/srv/full")}&recursive=true`)).status).toBe(204)
      expect((yield* api("DELETE", `${base}?path=${q("/srv/link2")}`)).status).toBe(204)
      expect(yield* sh("test -e /srv/full || echo gone; cat /srv/f.txt")).toBe("gone\n12345")
      expectError(yield* api("DELETE", `${base}?path=${q("/srv/full")}`), 404, "not_found")
      expectError(yield* api("DELETE", `${base}?path=${q("/")}&recursive=true`), 400, "invalid_request")
      expectError(yield* api("DELETE", `${base}?path=${q("//")}&recursive=true`), 400, "invalid_request")

      // /proc and /sys, by name and through links made inside: 400 on every route, nothing done.
      const kernel: ReadonlyArray<readonly [string, string, Record<string, unknown>?]> = [
        ["GET", `${base}/stat?path=${q("/proc/1/environ")}`],
        ["GET", `${base}/stat?path=${q("/tmp/p/1/environ")}`],
        ["GET", `${base}/stat?path=${q("/tmp/e")}`],
        ["GET", `${base}/stat?path=${q("/sys")}`],
        ["POST", `${base}/mkdir`, { path: "/proc/x" }],
        ["POST", `${base}/mkdir`, { path: "/tmp/p/x" }],
        ["POST", `${base}/move`, { from: "/tmp/p/1/environ", to: "/tmp/stolen" }],
        ["POST", `${base}/move`, { from: "/srv/f.txt", to: "/tmp/p/planted" }],
        ["POST", `${base}/move`, { from: "/sys/kernel", to: "/tmp/k" }],
        ["DELETE", `${base}?path=${q("/proc/1")}&recursive=true`],
        ["DELETE", `${base}?path=${q("/tmp/p/1/environ")}`]
      ]
      for (const [method, path, body] of kernel) {
        expectError(yield* api(method, path, body !== undefined ? { body } : {}), 400, "invalid_request")
      }
      expect(yield* sh("test -e /tmp/stolen || test -e /tmp/k || echo clean; cat /srv/f.txt")).toBe("clean\n12345")

      // Strict bodies and bounded strings.
      expectError(
        yield* api("POST", `${base}/mkdir`, { body: { path: "/srv/z", recursive: true } }),
        400,
        "invalid_request"
      )
      expectError(
        yield* api("POST", `${base}/move`, { body: { from: "/srv/f.txt", to: "/srv/g", force: true } }),
        400,
        "invalid_request"
      )
      expectError(
        yield* api("POST", `${base}/mkdir`, { body: { path: "/srv/z", mode: "rwx" } }),
        400,
        "invalid_request"
      )
      expectError(yield* api("POST", `${base}/mkdir`, { body: { path: "srv/rel" } }), 400, "invalid_request")
      expectError(
        yield* api("POST", `${base}/mkdir`, { body: { path: `/${"a".repeat(5000)}` } }),
        400,
        "invalid_request"
      )
      expectError(yield* api("DELETE", `${base}?path=${q("/srv/f.txt")}&recursive=yes`), 400, "invalid_request")

      // Scopes: a read-only key stats but makes nothing; a sandbox:<id> key stays in its sandbox.
      const readOnly = yield* identity.key(env.org.id, ["sandboxes:read"])
      expect((yield* api("GET", `${base}/stat?path=${q("/srv/f.txt")}`, { token: readOnly })).status).toBe(200)
      expectError(
        yield* api("POST", `${base}/mkdir`, { body: { path: "/srv/ro" }, token: readOnly }),
        403,
        "insufficient_scope"
      )
      expectError(
        yield* api("DELETE", `${base}?path=${q("/srv/f.txt")}`, { token: readOnly }),
        403,
        "insufficient_scope"
      )
      const confined = yield* identity.key(env.org.id, [`sandbox:${s.id}`])
      const own = yield* api("POST", `${base}/mkdir`, { body: { path: "/srv/own" }, token: confined })
      expect(own.status, own.text).toBe(201)
      for (
        const [method, path, body] of [
          ["GET", `/v1/sandboxes/${other.id}/files/stat?path=${q("/")}`],
          ["POST", `/v1/sandboxes/${other.id}/files/mkdir`, { path: "/srv/x" }],
          ["POST", `/v1/sandboxes/${other.id}/files/move`, { from: "/srv/a", to: "/srv/b" }],
          ["DELETE", `/v1/sandboxes/${other.id}/files?path=${q("/srv")}`]
        ] as const
      ) {
        expectError(
          yield* api(method, path, { ...(body !== undefined ? { body } : {}), token: confined }),
          403,
          "sandbox_out_of_scope"
        )
      }
      expect(yield* sh("test -e /srv/ro || echo none; test -f /srv/f.txt && echo kept")).toBe("none\nkept\n")

      // The SDK over the same routes.
      const svc = new Svc({ baseUrl: env.base, apiKey: env.org.token })
      const sandbox = yield* Effect.promise(() => svc.sandboxes.get(s.id))
      const sdkDir = yield* Effect.promise(() => sandbox.files.mkdir("/srv/sdk/a", { mode: "0750" }))
      expect(sdkDir).toMatchObject({ path: "/srv/sdk/a", type: "dir", mode: "0750" })
      yield* Effect.promise(() => sandbox.files.write("/srv/sdk/a/n.txt", "abc"))
      const sdkMoved = yield* Effect.promise(() => sandbox.files.move("/srv/sdk/a/n.txt", "/srv/sdk/m.txt"))
      expect(sdkMoved).toMatchObject({ name: "m.txt", type: "file", size: 3 })
      expect((yield* Effect.promise(() => sandbox.files.stat("/srv/sdk/m.txt"))).size).toBe(3)
      const refused = yield* Effect.promise(() => sandbox.files.remove("/srv/sdk").then(() => undefined, (e) => e))
      expect(refused).toBeInstanceOf(SvcError)
      expect((refused as SvcError).code).toBe("conflict")
      yield* Effect.promise(() => sandbox.files.remove("/srv/sdk", { recursive: true }))
      const gone = yield* Effect.promise(() => sandbox.files.stat("/srv/sdk").then(() => undefined, (e) => e))
      expect((gone as SvcError).status).toBe(404)

      yield* api("DELETE", `/v1/sandboxes/${other.id}`)
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    }))
})
