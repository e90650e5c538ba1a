/**
 * Builds the dashboard into `dist/` (what the API serves at `/`) when its sources changed since
 * the last build, and checks its weight: the JavaScript of the first load (the entry and what it
 * imports statically; the terminal's chunk loads later) must stay under `BUDGET_BYTES` gzipped.
 *
 *   node apps/dashboard/scripts/build.ts [--force] [--quiet]
 *
 * infra/bootstrap.sh runs it (so `npm start`, `npm test` and CI serve a current build); it costs
 * a hash of the sources when nothing changed. The stamp is a hash of the sources, the build
 * settings and the installed versions of the dashboard's dependencies. Builds of a checkout take
 * turns (`dist.lock`), and a build goes to a folder of its own, renamed into place when complete,
 * so a server never sees half of one.
 */
import { createHash } from "node:crypto"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { gzipSync } from "node:zlib"

export const PACKAGE = Path.resolve(import.meta.dirname, "..")
export const DIST = Path.join(PACKAGE, "dist")
const STAMP = ".build-stamp"

/** The first load's JavaScript, gzipped, at most (issue 15: under 200 KB). */
export const BUDGET_BYTES = 200 * 1024

const filesUnder = (dir: string): Array<string> =>
  Fs.readdirSync(dir, { withFileTypes: true })
    .flatMap((entry) => entry.isDirectory() ? filesUnder(Path.join(dir, entry.name)) : [Path.join(dir, entry.name)])
    .sort()

/** What a build depends on, as one hash. */
export const sourceHash = (): string => {
  const hash = createHash("sha256")
  const manifest = JSON.parse(Fs.readFileSync(Path.join(PACKAGE, "package.json"), "utf8")) as {
    dependencies?: Record<string, string>
    devDependencies?: Record<string, string>
  }
  const inputs = [
    ...["index.html", "vite.config.ts", "package.json", "tsconfig.json"].map((f) => Path.join(PACKAGE, f)),
    ...filesUnder(Path.join(PACKAGE, "src"))
  ]
  for (const file of inputs) {
    hash.update(Path.relative(PACKAGE, file)).update("\0").update(Fs.readFileSync(file)).update("\0")
  }
  for (const dependency of Object.keys({ ...manifest.dependencies, ...manifest.devDependencies }).sort()) {
    const installed = Path.join(PACKAGE, "node_modules", dependency, "package.json")
    const version = Fs.existsSync(installed)
      ? (JSON.parse(Fs.readFileSync(installed, "utf8")) as { version: string }).version
      : "missing"
    hash.update(`${dependency}@${version}\0`)
  }
  return hash.digest("hex")
}

/** Whether `dist/` is a complete build of the current sources. */
export const isFresh = (): boolean => {
  const stamp = Path.join(DIST, STAMP)
  return Fs.existsSync(Path.join(DIST, "index.html")) && Fs.existsSync(stamp) &&
    Fs.readFileSync(stamp, "utf8") === sourceHash()
}

/** Builds into a fresh folder and puts it in place of `dist/`. */
export const build = async (options: { readonly quiet?: boolean } = {}): Promise<void> => {
  const hash = sourceHash()
  const vite = await import("vite")
  const staging = `${DIST}.building-${process.pid}`
  Fs.rmSync(staging, { recursive: true, force: true })
  try {
    await vite.build({
      root: PACKAGE,
      configFile: Path.join(PACKAGE, "vite.config.ts"),
      logLevel: options.quiet === true ? "warn" : "info",
      build: { outDir: staging, emptyOutDir: true }
    })
    Fs.writeFileSync(Path.join(staging, STAMP), hash)
    const old = `${DIST}.old-${process.pid}`
    // Another build may have put its own in place meanwhile: the same sources, either will do.
    try {
      Fs.renameSync(DIST, old)
    } catch {
      // No dist yet.
    }
    try {
      Fs.renameSync(staging, DIST)
    } catch {
      // Another build's dist is in place.
    }
    Fs.rmSync(old, { recursive: true, force: true })
  } finally {
    Fs.rmSync(staging, { recursive: true, force: true })
  }
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as { code?: string }).code === "EPERM"
  }
}

/**
 * `f` while holding `dist.lock` (builds of one checkout one at a time: two test files may ask for
 * a build at once). A lock whose process is gone is taken over.
 */
const withLock = async <A>(f: () => Promise<A>): Promise<A> => {
  const lock = `${DIST}.lock`
  while (true) {
    try {
      Fs.writeFileSync(lock, String(process.pid), { flag: "wx" })
      break
    } catch (error) {
      if ((error as { code?: string }).code !== "EEXIST") throw error
      const holder = Number(Fs.readFileSync(lock, "utf8").trim())
      // Just created, not written yet (0): its holder is alive.
      if (holder > 0 && !alive(holder)) Fs.rmSync(lock, { force: true })
      else await new Promise((resolve) => setTimeout(resolve, 200))
    }
  }
  try {
    return await f()
  } finally {
    Fs.rmSync(lock, { force: true })
  }
}

/** Builds when the sources changed (or `force`); true when it built. */
export const ensureBuilt = async (options: { readonly force?: boolean; readonly quiet?: boolean } = {}) => {
  if (options.force !== true && isFresh()) return false
  return withLock(async () => {
    // Another process may have built it while this one waited.
    if (options.force !== true && isFresh()) return false
    await build(options)
    return true
  })
}

export interface Weight {
  /** The JavaScript files the first load runs (relative to dist/), with their gzipped sizes. */
  readonly firstLoad: ReadonlyArray<{ readonly file: string; readonly gzip: number }>
  readonly firstLoadGzip: number
  /** Every JavaScript file of the build, gzipped, lazily loaded ones included. */
  readonly totalGzip: number
}

const STATIC_IMPORT = /(?:^|[;}\s])(?:import|export)\s*(?:[\w*{}\s,$]*?\s*from\s*)?["']([^"']+\.js)["']/g

/** The weight of the build in `dist` (pure over the files). */
export const measure = (dist: string = DIST): Weight => {
  const html = Fs.readFileSync(Path.join(dist, "index.html"), "utf8")
  const entries = [...html.matchAll(/<(?:script[^>]*\ssrc|link[^>]*\shref)="\/([^"]+\.js)"/g)].map((m) => m[1]!)
  const seen = new Set<string>()
  const visit = (file: string) => {
    if (seen.has(file)) return
    seen.add(file)
    const code = Fs.readFileSync(Path.join(dist, file), "utf8")
    for (const m of code.matchAll(STATIC_IMPORT)) {
      const target = Path.posix.normalize(Path.posix.join(Path.posix.dirname(file), m[1]!))
      visit(target.replace(/^\//, ""))
    }
  }
  for (const entry of entries) visit(entry)
  const gzip = (file: string) => gzipSync(Fs.readFileSync(Path.join(dist, file)), { level: 9 }).byteLength
  const firstLoad = [...seen].map((file) => ({ file, gzip: gzip(file) }))
  const all = filesUnder(dist).filter((f) => f.endsWith(".js")).map((f) => Path.relative(dist, f))
  return {
    firstLoad,
    firstLoadGzip: firstLoad.reduce((sum, f) => sum + f.gzip, 0),
    totalGzip: all.reduce((sum, f) => sum + gzip(f), 0)
  }
}

if (import.meta.main) {
  const quiet = process.argv.includes("--quiet")
  const built = await ensureBuilt({ force: process.argv.includes("--force"), quiet })
  const weight = measure()
  const kb = (n: number) => `${(n / 1024).toFixed(1)} KB`
  if (built || !quiet) {
    process.stderr.write(
      `[dashboard] ${built ? "built" : "up to date"}: first load ${kb(weight.firstLoadGzip)} of JavaScript gzipped ` +
        `(budget ${kb(BUDGET_BYTES)}), ${kb(weight.totalGzip)} with the terminal\n`
    )
  }
  if (weight.firstLoadGzip > BUDGET_BYTES) {
    process.stderr.write(`[dashboard] the first load is over its budget: ${JSON.stringify(weight.firstLoad)}\n`)
    process.exitCode = 1
  }
}
