/**
 * The dashboard (apps/dashboard): its built files, served by the API process at `/` on GET and
 * HEAD. `npm start`, `npm test` and CI build them first (infra/bootstrap.sh, when the
 * dashboard's sources changed); `SVC_DASHBOARD_DIR` names another folder of built files.
 *
 * - `/assets/*` are Vite's content-hashed files: cached for a year, `immutable`.
 * - Everything else (`index.html`, a path of the app such as `/sandboxes/sbx_...`) is
 *   revalidated on each load (`no-cache` with an ETag), so a new build shows at the next load.
 * - A path without a file extension that names no file is the app's own route: `index.html`
 *   (the app routes in the browser). A missing file with an extension is 404.
 * - `/v1`, `/docs`, `/terminal` and `/metrics` are never answered here: their own routes win
 *   (static routes come before this wildcard), and a path under them that no route takes stays
 *   the contract's 404 `not_found`. Preview hosts never reach the app (`Preview.ts`).
 * - Files are read once per change (size and mtime) and kept with their gzip form, which a
 *   client that accepts gzip gets.
 * - The HTML page carries a Content-Security-Policy of its own origin only: the dashboard loads
 *   nothing from elsewhere and cannot be framed.
 */
import * as Errors from "@svc/domain/Errors"
import { Effect } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { createHash } from "node:crypto"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { gzipSync } from "node:zlib"
import { DashboardDir } from "../Config.ts"

/** Paths that belong to the API itself, never to the dashboard. */
const RESERVED = /^\/(?:v1|docs|terminal|metrics)(?:\/|$)/

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
  ".map": "application/json; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".woff2": "font/woff2",
  ".txt": "text/plain; charset=utf-8",
  ".webmanifest": "application/manifest+json"
}

/** Compressing these pays; images and fonts are compressed already. */
const COMPRESSIBLE = new Set([".html", ".js", ".mjs", ".css", ".json", ".map", ".svg", ".txt", ".webmanifest"])

export const IMMUTABLE = "public, max-age=31536000, immutable"
export const REVALIDATE = "no-cache"

export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  // The terminal (xterm.js) writes its measured styles into a <style> element.
  "style-src 'self' 'unsafe-inline'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'"
].join("; ")

/** What a GET of `pathname` is, before any file is read. */
export type Target =
  | { readonly _tag: "NotOurs" }
  | { readonly _tag: "File"; readonly file: string; readonly immutable: boolean; readonly fallback: boolean }

/**
 * Pure: the file a path names under the dashboard's folder (relative, `/` separated), whether a
 * missing one falls back to `index.html`, or that the path is not the dashboard's.
 */
export const targetOf = (pathname: string): Target => {
  let decoded: string
  try {
    decoded = decodeURIComponent(pathname)
  } catch {
    return { _tag: "NotOurs" }
  }
  if (RESERVED.test(decoded) || decoded.includes("\0") || decoded.includes("\\")) return { _tag: "NotOurs" }
  const segments = decoded.split("/").filter((segment) => segment !== "")
  // No way out of the folder, and no dotfiles.
  if (segments.some((segment) => segment.startsWith("."))) return { _tag: "NotOurs" }
  if (segments.length === 0) return { _tag: "File", file: "index.html", immutable: false, fallback: false }
  const last = segments[segments.length - 1]!
  return {
    _tag: "File",
    file: segments.join("/"),
    immutable: segments[0] === "assets",
    fallback: !last.includes(".")
  }
}

interface Cached {
  readonly version: string
  readonly body: Uint8Array
  readonly gzip: Uint8Array | undefined
  readonly etag: string
}

const NOT_FOUND = new Errors.NotFound({ error: "No such route" })
const NOT_BUILT = new Errors.Unavailable({
  error: "The dashboard is not built: run `npm start`, or `pnpm --filter @svc/dashboard build`"
})

const acceptsGzip = (request: HttpServerRequest.HttpServerRequest) =>
  /\bgzip\b/i.test(request.headers["accept-encoding"] ?? "")

/** The dashboard's files under `root`, read when they change. */
const makeFiles = (root: string) => {
  const cache = new Map<string, Cached>()

  /** The file, or undefined when there is none (or it is a folder). */
  const read = (file: string) =>
    Effect.tryPromise(async (): Promise<Cached | undefined> => {
      const full = NodePath.join(root, file)
      const stat = await Fs.stat(full).catch(() => undefined)
      if (stat === undefined || !stat.isFile()) return undefined
      const version = `${stat.size}:${stat.mtimeMs}`
      const hit = cache.get(file)
      if (hit !== undefined && hit.version === version) return hit
      const body = new Uint8Array(await Fs.readFile(full))
      const extension = NodePath.extname(file).toLowerCase()
      const entry: Cached = {
        version,
        body,
        gzip: COMPRESSIBLE.has(extension) && body.byteLength > 512 ? new Uint8Array(gzipSync(body)) : undefined,
        etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"`
      }
      cache.set(file, entry)
      return entry
    }).pipe(Effect.orElseSucceed(() => undefined))

  const respond = (request: HttpServerRequest.HttpServerRequest, file: string, entry: Cached, immutable: boolean) => {
    const extension = NodePath.extname(file).toLowerCase()
    const headers: Record<string, string> = {
      "cache-control": immutable ? IMMUTABLE : REVALIDATE,
      etag: entry.etag,
      vary: "accept-encoding",
      "x-content-type-options": "nosniff"
    }
    if (extension === ".html") {
      headers["content-security-policy"] = CONTENT_SECURITY_POLICY
      headers["referrer-policy"] = "same-origin"
      headers["x-frame-options"] = "DENY"
    }
    if (request.headers["if-none-match"] === entry.etag) return HttpServerResponse.empty({ status: 304, headers })
    const gzip = entry.gzip !== undefined && acceptsGzip(request)
    if (gzip) headers["content-encoding"] = "gzip"
    return HttpServerResponse.uint8Array(gzip ? entry.gzip! : entry.body, {
      contentType: CONTENT_TYPES[extension] ?? "application/octet-stream",
      headers
    })
  }

  return Effect.fn("Dashboard.serve")(function*(request: HttpServerRequest.HttpServerRequest) {
    const q = request.url.indexOf("?")
    const target = targetOf(q === -1 ? request.url : request.url.slice(0, q))
    if (target._tag === "NotOurs") return yield* NOT_FOUND
    const found = yield* read(target.file)
    if (found !== undefined) return respond(request, target.file, found, target.immutable)
    if (!target.fallback) return yield* NOT_FOUND
    const index = yield* read("index.html")
    if (index === undefined) return yield* NOT_BUILT
    return respond(request, "index.html", index, false)
  })
}

/** `GET /` and `GET /*`: the dashboard's files (see the module's comment). */
export const DashboardRoutes = HttpRouter.use(Effect.fnUntraced(function*(router) {
  const root = yield* Effect.orDie(DashboardDir)
  const serve = makeFiles(NodePath.resolve(root))
  const handler = HttpServerRequest.HttpServerRequest.use(serve)
  yield* router.add("GET", "/", handler)
  yield* router.add("GET", "/*", handler)
}))
