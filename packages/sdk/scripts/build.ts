/**
 * Builds the publishable package into packages/sdk/dist: `npm pack ./dist` (or `pnpm --filter
 * @svc/sdk pack`) gives a tarball that installs in any Node 22+ ESM project.
 *
 * The SDK imports `@svc/domain` (the API's schemas and HttpApi definition), a workspace package
 * that is not published: tsc compiles it beside the SDK (tsconfig.build.json maps it to its
 * source), its files land in dist/domain/, and every `@svc/domain/X` specifier of the output is
 * rewritten to the relative path of that file. `effect` is the one dependency.
 */
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const root = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "..")
const workspace = Path.resolve(root, "../..")
const build = Path.join(root, "build")
const dist = Path.join(root, "dist")

Fs.rmSync(build, { recursive: true, force: true })
Fs.rmSync(dist, { recursive: true, force: true })
execFileSync(Path.join(workspace, "node_modules/.bin/tsc"), ["-p", Path.join(root, "tsconfig.build.json")], {
  stdio: "inherit"
})

/** Where each compiled tree goes. */
const trees: ReadonlyArray<readonly [from: string, to: string]> = [
  [Path.join(build, "sdk/src"), dist],
  [Path.join(build, "domain/src"), Path.join(dist, "domain")]
]

const files = (dir: string): Array<string> =>
  Fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? files(Path.join(dir, entry.name)) : [Path.join(dir, entry.name)]
  )

const relative = (fromFile: string, target: string) => {
  const r = Path.relative(Path.dirname(fromFile), target).split(Path.sep).join("/")
  return r.startsWith(".") ? r : `./${r}`
}

const SPECIFIER = /(["'])(@svc\/domain\/[^"']+|\.\.?\/[^"']+?\.ts)\1/g

for (const [from, to] of trees) {
  for (const file of files(from)) {
    const out = Path.join(to, Path.relative(from, file))
    const text = Fs.readFileSync(file, "utf8").replace(SPECIFIER, (_, quote: string, spec: string) => {
      const target = spec.startsWith("@svc/domain/")
        ? relative(out, Path.join(dist, "domain", `${spec.slice("@svc/domain/".length).replace(/\.ts$/, "")}.js`))
        : spec.replace(/\.ts$/, ".js")
      return `${quote}${target}${quote}`
    })
    // Import and export statements and import() types (not the examples in comments).
    const left = /^(?:import|export)\b[^\n]*?from\s*["'](@svc\/[^"']+)["']|import\(\s*["'](@svc\/[^"']+)["']/m.exec(
      text
    )
    if (left !== null) throw new Error(`${out} still imports ${left[1] ?? left[2]}: add its package to the build`)
    Fs.mkdirSync(Path.dirname(out), { recursive: true })
    Fs.writeFileSync(out, text)
  }
}
Fs.rmSync(build, { recursive: true, force: true })

const own = JSON.parse(Fs.readFileSync(Path.join(root, "package.json"), "utf8"))
Fs.writeFileSync(
  Path.join(dist, "package.json"),
  JSON.stringify(
    {
      name: own.name,
      version: own.version,
      description: "Client of the sandbox platform's /v1 API: a Promise client, an Effect client, webhook verification",
      type: "module",
      engines: { node: ">=22" },
      exports: {
        ".": { types: "./index.d.ts", default: "./index.js" },
        "./*": { types: "./*.d.ts", default: "./*.js" }
      },
      sideEffects: false,
      dependencies: { effect: own.dependencies.effect }
    },
    null,
    2
  ) + "\n"
)
Fs.copyFileSync(Path.join(root, "README.md"), Path.join(dist, "README.md"))
process.stdout.write(`built ${dist}\n`)
