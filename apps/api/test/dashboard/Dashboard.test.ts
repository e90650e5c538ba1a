/**
 * The dashboard's files as the API serves them at `/`, over real HTTP, from a folder of known
 * files (`SVC_DASHBOARD_DIR`): content types, cache headers (hashed assets for a year, the rest
 * revalidated), gzip, ETags, the fallback to index.html for the app's own paths, and the paths
 * it never answers (/v1, /docs, /terminal, /metrics, dotfiles, a way out of the folder).
 */
import { describe, expect, it } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { ConfigProvider, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import * as Fs from "node:fs"
import * as Http from "node:http"
import * as Os from "node:os"
import * as Path from "node:path"
import { gunzipSync } from "node:zlib"
import { CONTENT_SECURITY_POLICY, IMMUTABLE, REVALIDATE, targetOf } from "../../src/Http/Dashboard.ts"
import * as Server from "../../src/Server.ts"
import { serveApi } from "../../testing/Sandboxes.ts"

const INDEX = "<!doctype html><html><head><title>dashboard</title></head><body><div id=app></div></body></html>"
const SCRIPT = `console.log(${JSON.stringify("x".repeat(2000))})`

/** A folder of built files, as Vite lays them out. */
const makeDist = (withIndex = true) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-dashboard-"))
      Fs.mkdirSync(Path.join(dir, "assets"))
      if (withIndex) Fs.writeFileSync(Path.join(dir, "index.html"), INDEX)
      Fs.writeFileSync(Path.join(dir, "assets", "index-abc123.js"), SCRIPT)
      Fs.writeFileSync(Path.join(dir, "assets", "index-abc123.css"), "body{margin:0}")
      Fs.writeFileSync(Path.join(dir, ".build-stamp"), "secret-ish")
      Fs.writeFileSync(Path.join(Path.dirname(dir), "outside.txt"), "outside")
      return dir
    }),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )

const settings = (dir: string) =>
  ConfigProvider.layerAdd(ConfigProvider.fromUnknown({ SVC_DASHBOARD_DIR: dir }), { asPrimary: true })

const serveWith = (dir: string) =>
  serve(
    HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provide(SecretBox.layer),
      Layer.provide(Layer.mergeAll(TestDatabase.layer, TestNats.layer)),
      Layer.provide(settings(dir))
    )
  )

interface Raw {
  readonly status: number
  readonly headers: Http.IncomingHttpHeaders
  readonly body: Buffer
}

/** A request as it goes on the wire (fetch would undo gzip and normalize paths). */
const raw = (base: string, path: string, headers: Record<string, string> = {}, method = "GET") =>
  Effect.promise(() =>
    new Promise<Raw>((resolve, reject) => {
      const url = new URL(base)
      const request = Http.request({ host: url.hostname, port: url.port, path, method, headers }, (response) => {
        const chunks: Array<Buffer> = []
        response.on("data", (chunk: Buffer) => chunks.push(chunk))
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks) }))
      })
      request.on("error", reject)
      request.end()
    })
  )

const expectNotFound = (res: Raw) => {
  expect(res.status, res.body.toString()).toBe(404)
  expect(res.headers["content-type"]).toContain("application/json")
  expect(JSON.parse(res.body.toString())).toEqual({ error: expect.any(String), code: "not_found" })
}

describe("the dashboard's files", () => {
  it("targetOf: the file a path names, the fallback, and what is not the dashboard's", () => {
    expect(targetOf("/")).toEqual({ _tag: "File", file: "index.html", immutable: false, fallback: false })
    expect(targetOf("/assets/index-1.js")).toEqual({
      _tag: "File",
      file: "assets/index-1.js",
      immutable: true,
      fallback: false
    })
    expect(targetOf("/sandboxes/sbx_1")).toEqual({
      _tag: "File",
      file: "sandboxes/sbx_1",
      immutable: false,
      fallback: true
    })
    for (
      const path of [
        "/v1",
        "/v1/",
        "/v1/nope",
        "/docs",
        "/docs/x",
        "/terminal",
        "/metrics",
        "/%761/nope",
        "/../etc/passwd",
        "/assets/%2e%2e/%2e%2e/x",
        "/.build-stamp",
        "/a\\b",
        "/%00",
        "/%E0%A4%A"
      ]
    ) {
      expect(targetOf(path), path).toEqual({ _tag: "NotOurs" })
    }
  })

  it.live("index.html at / and at the app's own paths, revalidated, with its security headers", () =>
    Effect.gen(function*() {
      const base = yield* serveWith(yield* makeDist())
      for (const path of ["/", "/sandboxes", "/sandboxes/sbx_01abc", "/keys?x=1", "/webhooks/wh_1/"]) {
        const res = yield* raw(base, path)
        expect(res.status, path).toBe(200)
        expect(res.headers["content-type"]).toBe("text/html; charset=utf-8")
        expect(res.headers["cache-control"]).toBe(REVALIDATE)
        expect(res.headers["content-security-policy"]).toBe(CONTENT_SECURITY_POLICY)
        expect(res.headers["x-frame-options"]).toBe("DENY")
        expect(res.headers["x-content-type-options"]).toBe("nosniff")
        expect(res.headers["x-request-id"]).toMatch(/^req_/)
        expect(res.body.toString()).toBe(INDEX)
      }
      // HEAD: the headers without the body.
      const head = yield* raw(base, "/", {}, "HEAD")
      expect(head.status).toBe(200)
      expect(head.headers["content-type"]).toBe("text/html; charset=utf-8")
      expect(head.body.byteLength).toBe(0)
    }).pipe(Effect.scoped))

  it.live("hashed assets: their content type, cached for a year, gzipped for who accepts it, ETags", () =>
    Effect.gen(function*() {
      const base = yield* serveWith(yield* makeDist())
      const js = yield* raw(base, "/assets/index-abc123.js")
      expect(js.status).toBe(200)
      expect(js.headers["content-type"]).toBe("text/javascript; charset=utf-8")
      expect(js.headers["cache-control"]).toBe(IMMUTABLE)
      expect(js.headers["content-encoding"]).toBeUndefined()
      expect(js.body.toString()).toBe(SCRIPT)
      expect(js.headers["content-security-policy"]).toBeUndefined()

      const css = yield* raw(base, "/assets/index-abc123.css")
      expect(css.headers["content-type"]).toBe("text/css; charset=utf-8")
      expect(css.body.toString()).toBe("body{margin:0}")

      const zipped = yield* raw(base, "/assets/index-abc123.js", { "accept-encoding": "gzip, deflate, br" })
      expect(zipped.headers["content-encoding"]).toBe("gzip")
      expect(zipped.headers["vary"]).toBe("accept-encoding")
      expect(zipped.body.byteLength).toBeLessThan(SCRIPT.length)
      expect(gunzipSync(zipped.body).toString()).toBe(SCRIPT)

      const etag = js.headers["etag"]!
      expect(etag).toMatch(/^"[\w-]+"$/)
      const again = yield* raw(base, "/assets/index-abc123.js", { "if-none-match": etag })
      expect(again.status).toBe(304)
      expect(again.body.byteLength).toBe(0)
      const stale = yield* raw(base, "/assets/index-abc123.js", { "if-none-match": "\"other\"" })
      expect(stale.status).toBe(200)
    }).pipe(Effect.scoped))

  it.live("a new build is served at the next request", () =>
    Effect.gen(function*() {
      const dir = yield* makeDist()
      const base = yield* serveWith(dir)
      expect((yield* raw(base, "/")).body.toString()).toBe(INDEX)
      Fs.writeFileSync(Path.join(dir, "index.html"), "<!doctype html><p>new build, longer than before")
      expect((yield* raw(base, "/sandboxes")).body.toString()).toBe("<!doctype html><p>new build, longer than before")
    }).pipe(Effect.scoped))

  it.live("never answers for the API's own paths, missing files, dotfiles or a way out of the folder", () =>
    Effect.gen(function*() {
      const base = yield* serveWith(yield* makeDist())
      for (
        const path of [
          "/v1",
          "/v1/nope",
          "/v1/sandboxes/sbx_1/nope",
          "/docs/nope",
          "/metrics",
          "/assets/missing-123.js",
          "/favicon.ico",
          "/.build-stamp",
          "/../outside.txt",
          "/assets/%2e%2e/%2e%2e/outside.txt",
          "/%2e%2e/outside.txt"
        ]
      ) {
        expectNotFound(yield* raw(base, path))
      }
      // Their own routes still answer as before.
      const docs = yield* raw(base, "/docs")
      expect(docs.status).toBe(200)
      expect(docs.body.toString()).not.toBe(INDEX)
      const openapi = yield* raw(base, "/v1/openapi.json")
      expect(JSON.parse(openapi.body.toString()).openapi).toMatch(/^3\.1/)
      const terminal = yield* raw(base, "/terminal?sandbox_id=sbx_x")
      expect(terminal.status).toBe(401)
      expect(JSON.parse(terminal.body.toString()).code).toBe("unauthenticated")
      const health = yield* raw(base, "/v1/health")
      expect(health.status).toBe(200)
      // Other methods are not the dashboard's either.
      expectNotFound(yield* raw(base, "/", {}, "POST"))
      expectNotFound(yield* raw(base, "/sandboxes", {}, "DELETE"))
      // ?token= stays refused everywhere but /terminal.
      const token = yield* raw(base, "/?token=svc_live_x")
      expect(token.status).toBe(401)
      expect(JSON.parse(token.body.toString()).code).toBe("token_in_query_not_allowed")
    }).pipe(Effect.scoped))

  it.live("a preview host's request goes to the preview proxy, never to the dashboard", () =>
    Effect.gen(function*() {
      const dir = yield* makeDist()
      // The API's own Node server, with the preview hook in front of the app.
      const base = yield* serveApi.pipe(
        Effect.provide(Layer.mergeAll(TestDatabase.layer, TestNats.layer, SecretBox.layer, settings(dir)))
      )
      expect((yield* raw(base, "/sandboxes")).body.toString()).toBe(INDEX)
      for (const path of ["/", "/sandboxes", "/assets/index-abc123.js"]) {
        const res = yield* raw(base, path, { host: "8080-sbx_01kab3n4sgz0d5qpxg3m9kaxyz.preview.localhost" })
        expect(res.status, path).toBeGreaterThanOrEqual(400)
        expect(res.body.toString(), path).not.toBe(INDEX)
        expect(res.body.toString(), path).not.toBe(SCRIPT)
      }
    }).pipe(Effect.scoped))

  it.live("without a build: 503 unavailable saying how to build it, and the API still serves", () =>
    Effect.gen(function*() {
      const base = yield* serveWith(yield* makeDist(false))
      const res = yield* raw(base, "/sandboxes")
      expect(res.status).toBe(503)
      const body = JSON.parse(res.body.toString())
      expect(body.code).toBe("unavailable")
      expect(body.error).toContain("npm start")
      expect((yield* raw(base, "/v1/health")).status).toBe(200)
      // A file that exists is still served.
      expect((yield* raw(base, "/assets/index-abc123.css")).status).toBe(200)
    }).pipe(Effect.scoped))
})
