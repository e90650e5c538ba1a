/**
 * Declared dependencies that nothing uses, for every workspace package (the root, `packages/*`,
 * `apps/*`). A dependency is used when one of the package's files
 * - imports it (`from "x"`, `import("x/sub")`, `require("x")`),
 * - runs one of its binaries (named in the package.json scripts, a shell script, or quoted in a
 *   TypeScript file, as `"tsc"` in Typecheck.test.ts),
 * - points into it (`node_modules/@dprint/json/plugin.wasm` in dprint.json),
 * or it is `@types/node` and the package imports a `node:` module. The root's files are the whole
 * repository: its tools serve every package. Run as a script, it prints what it finds.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"

export interface UnusedDependency {
  /** The package.json's folder, relative to the root ("." for the root). */
  readonly workspace: string
  readonly dependency: string
}

const SKIPPED = new Set(["node_modules", ".git", ".svc", "dist", "coverage"])
const SOURCE = /\.(?:[cm]?[jt]sx?)$/
const TEXT = /\.(?:[cm]?[jt]sx?|json|jsonc|ya?ml|sh)$/

const filesUnder = (dir: string): Array<string> =>
  Fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = Path.join(dir, entry.name)
    if (entry.isDirectory()) return SKIPPED.has(entry.name) ? [] : filesUnder(full)
    // The lockfile names every package; `.ci/run` is a shell script without an extension.
    return entry.isFile() && entry.name !== "pnpm-lock.yaml" && (TEXT.test(entry.name) || entry.name === "run")
      ? [full]
      : []
  })

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")

/** `@scope/name/sub/path` → `@scope/name`, `name/sub` → `name`. */
const packageOf = (specifier: string) =>
  specifier
    .split("/")
    .slice(0, specifier.startsWith("@") ? 2 : 1)
    .join("/")

const binariesOf = (folder: string, dependency: string): Array<string> => {
  const manifest = Path.join(folder, "node_modules", dependency, "package.json")
  if (!Fs.existsSync(manifest)) return []
  const bin = (JSON.parse(Fs.readFileSync(manifest, "utf8")) as { bin?: string | Record<string, string> }).bin
  if (bin === undefined) return []
  return typeof bin === "string" ? [dependency.split("/").pop()!] : Object.keys(bin)
}

export const workspaces = (root: string): Array<string> => [
  ".",
  ...["packages", "apps"].flatMap((group) =>
    Fs.existsSync(Path.join(root, group))
      ? Fs.readdirSync(Path.join(root, group))
        .map((name) => `${group}/${name}`)
        .filter((folder) => Fs.existsSync(Path.join(root, folder, "package.json")))
      : []
  )
]

export const unusedDependencies = (root: string): Array<UnusedDependency> =>
  workspaces(root).flatMap((workspace) => {
    const folder = Path.join(root, workspace)
    const manifest = JSON.parse(Fs.readFileSync(Path.join(folder, "package.json"), "utf8")) as {
      dependencies?: Record<string, string>
      devDependencies?: Record<string, string>
      scripts?: Record<string, string>
    }
    const declared = Object.keys({ ...manifest.dependencies, ...manifest.devDependencies })
    const files = filesUnder(folder).filter((file) => Path.basename(file) !== "package.json")
    const sources = files.filter((file) => SOURCE.test(file)).map((file) => Fs.readFileSync(file, "utf8"))
    const imported = new Set<string>()
    for (const source of sources) {
      for (const match of source.matchAll(/(?:\bfrom|\bimport|\brequire)\s*\(?\s*["']([^"'.][^"']*)["']/g)) {
        imported.add(match[1]!.startsWith("node:") ? "node:" : packageOf(match[1]!))
      }
    }
    const read = (pattern: RegExp) =>
      files.filter((file) => pattern.test(file)).map((file) => Fs.readFileSync(file, "utf8"))
    // Where a binary runs: the scripts, shell scripts (`.ci/run` has no extension), or a quoted name in code.
    const shell = [...Object.values(manifest.scripts ?? {}), ...read(/(?:\.sh|\/run)$/)].join("\n")
    const code = sources.join("\n")
    const configs = read(/\.(?:json|jsonc|ya?ml)$/).join("\n")
    const runs = (bin: string) =>
      new RegExp(`(?:^|[\\s/&|;(])${escape(bin)}(?=$|[\\s&|;)])`, "m").test(shell) ||
      code.includes(`"${bin}"`) || code.includes(`'${bin}'`)
    const used = (dependency: string) =>
      imported.has(dependency) ||
      (dependency === "@types/node" && imported.has("node:")) ||
      `${code}\n${configs}`.includes(`node_modules/${dependency}/`) ||
      binariesOf(folder, dependency).some(runs)
    return declared.filter((dependency) => !used(dependency)).map((dependency) => ({ workspace, dependency }))
  })

if (import.meta.main) {
  const found = unusedDependencies(Path.resolve(import.meta.dirname, "../../.."))
  for (const { dependency, workspace } of found) {
    process.stdout.write(`${workspace}/package.json: ${dependency} is declared but unused\n`)
  }
  process.exitCode = found.length === 0 ? 0 : 1
}
