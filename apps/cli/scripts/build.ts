/**
 * Builds the installable `svc` into apps/cli/dist: `npm pack ./dist` (what `npm run cli:pack`
 * does) gives a tarball that `npm install -g` installs on any machine with Node 22+, offline: it
 * has no dependency.
 *
 * `src/Client/main.ts` (the user's commands, no operator command, no server package) bundled by
 * rolldown into one ES module, `cli.mjs`, with the SDK, the domain schemas it imports and the
 * parts of `effect` they use: one file to read and compile instead of the ~350 modules the
 * workspace's sources load (TypeScript, and `effect`'s barrels whole), which is what keeps
 * `svc --help` near a bare `node -e 0` (bench/cli.ts). The `bin` is `svc.mjs`, which turns on
 * V8's compile cache (Node 22.1+) before loading it.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { build } from "rolldown"

const root = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "..")
const dist = Path.join(root, "dist")
const sdk = JSON.parse(Fs.readFileSync(Path.join(root, "../../packages/sdk/package.json"), "utf8"))

/** The workspace's folders the client is built from; a module of any other is the server's. */
const CLIENT = ["apps/cli/src", "packages/sdk/src", "packages/domain/src", "packages/config/src", "packages/mcp/src"]

/** `input` and what it imports (the workspace's and `effect`'s), as one minified ES module `file`. */
export const bundle = async (input: string, file: string): Promise<ReadonlyArray<string>> => {
  const bundled = await build({
    input,
    platform: "node",
    // Comments and logs of the bundler are not the user's business; a warning is still printed.
    logLevel: "warn",
    // One file, but for what is imported lazily (`svc mcp`'s MCP SDK): a chunk of its own beside
    // it, which `svc --help` never reads.
    output: {
      dir: Path.dirname(file),
      entryFileNames: Path.basename(file),
      chunkFileNames: "chunks/[name]-[hash].mjs",
      format: "esm",
      minify: true
    }
  })
  return bundled.output.flatMap((o) => (o.type === "chunk" ? o.moduleIds : []))
}

/** The package around the bundle: the command, its manifest (no dependency), the README. */
const writePackage = () => {
  // The command: the compile cache on, then the bundle.
  Fs.writeFileSync(
    Path.join(dist, "svc.mjs"),
    `#!/usr/bin/env node
// svc: V8's compile cache (Node 22.1+, in the system's temporary folder) makes every start after
// the first skip compiling the bundle.
import module from "node:module"
module.enableCompileCache?.()
await import("./cli.mjs")
`,
    { mode: 0o755 }
  )

  Fs.writeFileSync(
    Path.join(dist, "package.json"),
    JSON.stringify(
      {
        name: "@svc/cli",
        version: sdk.version,
        description: "svc: the sandbox platform's command line, a client of its /v1 API (SVC_API_URL, SVC_API_KEY)",
        type: "module",
        engines: { node: ">=22" },
        bin: { svc: "./svc.mjs" },
        files: ["svc.mjs", "cli.mjs", "chunks", "README.md"]
      },
      null,
      2
    ) + "\n"
  )
  Fs.copyFileSync(Path.join(root, "README.md"), Path.join(dist, "README.md"))
}

if (import.meta.main) {
  Fs.rmSync(dist, { recursive: true, force: true })
  const workspace = Path.resolve(root, "../..")
  for (const id of await bundle(Path.join(root, "src/Client/main.ts"), Path.join(dist, "cli.mjs"))) {
    const file = Path.relative(workspace, id)
    if (file.startsWith("..") || file.startsWith("node_modules/") || !Path.isAbsolute(id)) continue
    if (!CLIENT.some((folder) => file.startsWith(folder + "/"))) {
      throw new Error(`the client's bundle holds ${file}: a user command imports the server`)
    }
  }
  writePackage()
  process.stdout.write(`built ${dist}\n`)
}
