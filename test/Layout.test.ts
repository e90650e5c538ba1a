/**
 * The rules of the layout (README "Layout"), checked on the import graph as written: the host
 * side runs without a database, packages never reach into apps, the domain depends on nothing
 * of ours. Static: it reads import specifiers, so it sees every path, taken or not.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const root = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "..")
const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"|import\(\s*"([^"]+)"\s*\)/g

const workspace = new Map<string, string>()
for (const group of ["packages", "apps"]) {
  for (const name of Fs.readdirSync(Path.join(root, group))) {
    const pkg = Path.join(root, group, name, "package.json")
    if (Fs.existsSync(pkg)) workspace.set(JSON.parse(Fs.readFileSync(pkg, "utf8")).name, Path.join(root, group, name))
  }
}

/** `@svc/x/A/B` → packages/x/src/A/B.ts; a relative specifier → the file it names. */
const resolve = (from: string, specifier: string): string | undefined => {
  if (specifier.startsWith(".")) return Path.resolve(Path.dirname(from), specifier)
  const match = /^(@svc\/[a-z-]+)\/(.+)$/.exec(specifier)
  const dir = match && workspace.get(match[1]!)
  return dir ? Path.join(dir, "src", `${match![2]}.ts`) : undefined
}

/** Every specifier reachable from `entry` through our own modules (source files only). */
const reachable = (entry: string) => {
  const seen = new Set<string>()
  const specifiers = new Map<string, string>()
  const visit = (file: string) => {
    if (seen.has(file)) return
    seen.add(file)
    const text = Fs.readFileSync(file, "utf8")
    for (const m of text.matchAll(IMPORT)) {
      // Type-only imports never load: they cannot pull a dependency in.
      if (/^\s*(?:import|export)\s+type\s/.test(m[0].trim())) continue
      const specifier = (m[1] ?? m[2])!
      if (!specifiers.has(specifier)) specifiers.set(specifier, Path.relative(root, file))
      const next = resolve(file, specifier)
      if (next && Fs.existsSync(next)) visit(next)
    }
  }
  visit(entry)
  return { files: [...seen].map((f) => Path.relative(root, f)), specifiers }
}

const sourceFiles = (dir: string): Array<string> =>
  Fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(Path.join(dir, e.name)) : e.name.endsWith(".ts") ? [Path.join(dir, e.name)] : []
  )

const CONTROL_PLANE =
  /^(effect\/sql|effect\/unstable\/sql|@effect\/sql-pg|@svc\/(db|actors|events|hosts|templates|sandboxes|auth|webhooks)\/)/

describe("layout", () => {
  it("the host agent loads no SQL, no actor runtime and no control-plane package", () => {
    const entry = Path.join(root, "apps/agent/src/main.ts")
    const { files, specifiers } = reachable(entry)
    expect(files.length).toBeGreaterThan(10)
    const offending = [...specifiers].filter(([s]) => CONTROL_PLANE.test(s)).map(([s, from]) => `${from} imports ${s}`)
    expect(offending).toEqual([])
    // The walk does reach the host side: it would notice a driver pulled in through a new path.
    expect(files.some((f) => f.startsWith("packages/host/src/Driver"))).toBe(true)
  })

  it("the host side and its protocol import no control plane", () => {
    for (const pkg of ["packages/host/src", "packages/host-protocol/src"]) {
      for (const file of sourceFiles(Path.join(root, pkg))) {
        const { specifiers } = reachable(file)
        const offending = [...specifiers].filter(([s]) => CONTROL_PLANE.test(s)).map(([s, from]) =>
          `${from} imports ${s}`
        )
        expect(offending).toEqual([])
      }
    }
  })

  it("packages never import apps; the domain imports nothing of ours", () => {
    const apps = [...workspace].filter(([, dir]) => dir.includes(`${Path.sep}apps${Path.sep}`)).map(([name]) => name)
    const offending: Array<string> = []
    for (const file of sourceFiles(Path.join(root, "packages"))) {
      if (file.includes(`${Path.sep}node_modules${Path.sep}`) || !file.includes(`${Path.sep}src${Path.sep}`)) continue
      const text = Fs.readFileSync(file, "utf8")
      const rel = Path.relative(root, file)
      for (const m of text.matchAll(IMPORT)) {
        const specifier = (m[1] ?? m[2])!
        if (apps.some((app) => specifier.startsWith(`${app}/`))) offending.push(`${rel} imports ${specifier}`)
        if (rel.startsWith("packages/domain/") && specifier.startsWith("@svc/")) {
          offending.push(`${rel} imports ${specifier}`)
        }
      }
    }
    expect(offending).toEqual([])
  })

  it("every @svc import of a package's source is one of its declared dependencies", () => {
    const offending: Array<string> = []
    for (const [name, dir] of workspace) {
      const declared = new Set(
        Object.keys(JSON.parse(Fs.readFileSync(Path.join(dir, "package.json"), "utf8")).dependencies ?? {})
      )
      for (const file of sourceFiles(Path.join(dir, "src"))) {
        for (const m of Fs.readFileSync(file, "utf8").matchAll(IMPORT)) {
          const pkg = /^(@svc\/[a-z-]+)\//.exec((m[1] ?? m[2])!)?.[1]
          if (pkg && pkg !== name && !declared.has(pkg)) {
            offending.push(`${Path.relative(root, file)} imports undeclared ${pkg}`)
          }
        }
      }
    }
    expect(offending).toEqual([])
  })

  it("no test imports another package's test folder (shared fixtures live in @svc/testing or an app's testing/)", () => {
    const testFolders = [...[...workspace.values()].map((dir) => Path.join(dir, "test")), Path.join(root, "test")]
    /** The test folder `file` is in, if any: a workspace's `test/`, or the root's. */
    const testFolderOf = (file: string) => testFolders.find((folder) => file.startsWith(folder + Path.sep))
    const scripts = (dir: string): Array<string> =>
      Fs.existsSync(dir)
        ? Fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
          e.isDirectory()
            ? e.name === "node_modules" ? [] : scripts(Path.join(dir, e.name))
            : /\.[cm]?[jt]s$/.test(e.name)
            ? [Path.join(dir, e.name)]
            : []
        )
        : []
    const offending: Array<string> = []
    const testing = [...workspace.values()].map((dir) => Path.join(dir, "testing"))
    for (const file of [...testFolders, ...testing].flatMap(scripts)) {
      const own = testFolderOf(file)
      for (const m of Fs.readFileSync(file, "utf8").matchAll(IMPORT)) {
        const specifier = (m[1] ?? m[2])!
        if (!specifier.startsWith(".")) continue
        const target = testFolderOf(Path.resolve(Path.dirname(file), specifier))
        if (target !== undefined && target !== own) offending.push(`${Path.relative(root, file)} imports ${specifier}`)
      }
    }
    expect(offending).toEqual([])
  })

  it("the API's tests are in folders named for what they test, none at the top of apps/api/test", () => {
    const top = Fs.readdirSync(Path.join(root, "apps/api/test"), { withFileTypes: true })
    expect(top.filter((e) => e.isFile()).map((e) => e.name)).toEqual([])
    expect(top.map((e) => e.name)).toEqual(expect.arrayContaining(["sandboxes", "templates", "secrets", "volumes"]))
  })

  it("the packages' dependencies have no cycle (hosts below templates below sandboxes)", () => {
    const deps = new Map(
      [...workspace].map(([name, dir]) => [
        name,
        Object.keys(JSON.parse(Fs.readFileSync(Path.join(dir, "package.json"), "utf8")).dependencies ?? {})
          .filter((d) => workspace.has(d))
      ])
    )
    const cycles: Array<string> = []
    const state = new Map<string, "visiting" | "done">()
    const visit = (name: string, path: ReadonlyArray<string>) => {
      if (state.get(name) === "done") return
      if (state.get(name) === "visiting") return void cycles.push([...path, name].join(" -> "))
      state.set(name, "visiting")
      for (const next of deps.get(name) ?? []) visit(next, [...path, name])
      state.set(name, "done")
    }
    for (const name of deps.keys()) visit(name, [])
    expect(cycles).toEqual([])
    expect(deps.get("@svc/templates")).toContain("@svc/hosts")
    expect(deps.get("@svc/sandboxes")).toEqual(expect.arrayContaining(["@svc/hosts", "@svc/templates"]))
    expect(deps.get("@svc/hosts")).not.toContain("@svc/sandboxes")
    expect(deps.get("@svc/templates")).not.toContain("@svc/sandboxes")
  })
})
