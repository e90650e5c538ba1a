/**
 * The installable `svc` as a user gets it: built and packed as `npm run cli:pack` does, installed
 * with `npm install -g --prefix <dir> --offline` into a folder of the system's temporary folder
 * (outside the workspace: no TypeScript, no workspace package, nothing from a registry), and run
 * from there, with a PATH holding only Node and the system's tools, against a real stack (the
 * API, the runtime, a real agent).
 */
import { expect, layer } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { ok, TOOLS } from "@svc/api/testing/Mcp"
import { Env, EnvLayer } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { afterAll } from "vitest"

const run = promisify(execFile)
const CLI = Path.resolve(import.meta.dirname, "..")
/** Node (22 or later) and the system's tools, nothing of the workspace. */
const PATH = `${Path.dirname(process.execPath)}:/usr/bin:/bin`

/** Builds, packs and installs the CLI into a fresh prefix, once for the file's tests; the prefix. */
let installing: Promise<{ readonly home: string; readonly prefix: string }> | undefined
const installPacked = Effect.promise(() =>
  installing ??= (async () => {
    const home = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-cli-user-"))
    const prefix = Path.join(home, "prefix")
    await run(process.execPath, [Path.join(CLI, "scripts/build.ts")])
    const { stdout } = await run("npm", ["pack", "./dist", "--pack-destination", home, "--json"], {
      cwd: CLI,
      env: { ...process.env, PATH }
    })
    const tarball = Path.join(home, (JSON.parse(stdout) as Array<{ filename: string }>)[0]!.filename)
    await run("npm", ["install", "-g", "--prefix", prefix, "--offline", "--no-audit", "--no-fund", tarball], {
      cwd: home,
      env: { PATH, HOME: home, npm_config_cache: Path.join(home, "npm-cache") },
      timeout: 120_000
    })
    return { home, prefix }
  })()
)
afterAll(async () => {
  if (installing !== undefined) Fs.rmSync((await installing).home, { recursive: true, force: true })
})

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** The installed `svc args...`, from the user's folder, with the stack's URL and key (or `env`). */
const svc = (args: ReadonlyArray<string>, env?: Record<string, string>) =>
  Effect.gen(function*() {
    const stack = yield* Env
    const { home, prefix } = yield* installPacked
    return yield* Effect.promise(() =>
      new Promise<Run>((resolve) => {
        execFile(
          Path.join(prefix, "bin/svc"),
          args,
          {
            cwd: home,
            env: env ?? { PATH, HOME: home, SVC_API_URL: stack.base, SVC_API_KEY: stack.org.token },
            timeout: 120_000
          },
          (error, stdout, stderr) =>
            resolve({ code: error ? typeof error.code === "number" ? error.code : -1 : 0, stdout, stderr })
        )
      })
    )
  })

const json = (run: Run) => {
  expect(run.code, run.stderr).toBe(0)
  return JSON.parse(run.stdout)
}

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("the packed svc, installed with npm -g", (it) => {
  it.effect(
    "installed as one bundle without dependencies; --help lists the user's commands only",
    () =>
      Effect.gen(function*() {
        const { prefix } = yield* installPacked
        const installed = Path.join(prefix, "lib/node_modules/@svc/cli")
        expect(Fs.lstatSync(installed).isSymbolicLink()).toBe(false)
        expect(Fs.readdirSync(installed).sort()).toEqual(["README.md", "chunks", "cli.mjs", "package.json", "svc.mjs"])
        const manifest = JSON.parse(Fs.readFileSync(Path.join(installed, "package.json"), "utf8"))
        expect(manifest.dependencies).toBeUndefined()
        expect(manifest.engines).toEqual({ node: ">=22" })
        // No workspace import is left for Node to resolve.
        for (const file of ["cli.mjs", ...Fs.readdirSync(Path.join(installed, "chunks")).map((f) => `chunks/${f}`)]) {
          expect(Fs.readFileSync(Path.join(installed, file), "utf8")).not.toMatch(
            /from\s*["'](@svc|@modelcontextprotocol)\//
          )
        }

        const help = yield* svc(["--help"])
        expect(help.code, help.stderr).toBe(0)
        for (const name of ["whoami", "sandbox", "secret", "volume", "webhook", "template", "app", "events", "usage"]) {
          expect(help.stdout).toMatch(new RegExp(`\\n {2}${name} `))
        }
        // The operator's commands stay in the repository's svc.
        for (const name of ["dev", "api", "runtime", "dispatcher", "agent"]) {
          expect(help.stdout).not.toMatch(new RegExp(`\\n {2}${name} `))
        }
        const org = yield* svc(["org", "--help"])
        expect(org.stdout).toMatch(/\n {2}rename /)
        expect(org.stdout).not.toMatch(/\n {2}create /)
        const key = yield* svc(["key", "--help"])
        expect(key.stdout).toMatch(/\n {2}mint /)
        expect(key.stdout).not.toMatch(/\n {2}create /)
        expect((yield* svc(["--version"])).stdout).toContain(manifest.version)
        // Without a key (and no dev stack's credentials in the folder): what to set, exit 1.
        const bare = yield* svc(["whoami"], { PATH, HOME: (yield* installPacked).home })
        expect(bare).toMatchObject({ code: 1, stdout: "" })
        expect(bare.stderr).toMatch(/^No credentials: set SVC_API_KEY/)
      }),
    300_000
  )

  it.effect(
    "whoami, sandbox create --wait, exec (its exit code), delete --wait against the stack",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        expect(json(yield* svc(["whoami", "--json"]))).toMatchObject({
          org: { id: env.org.id },
          credential: { type: "api_key" }
        })
        const sandbox = json(yield* svc(["sandbox", "create", "--name", "packed-cli", "--wait", "--json"]))
        expect(sandbox).toMatchObject({ name: "packed-cli", state: "running" })
        const ran = yield* svc(["sandbox", "exec", sandbox.id, "--", "sh", "-c", "echo from the packed cli; exit 3"])
        expect(ran).toMatchObject({ code: 3, stdout: "from the packed cli\n" })
        expect(json(yield* svc(["sandbox", "delete", sandbox.id, "--wait", "--json"])).state).toBe("deleted")
        // An API error is the user's answer: the code, the message, a hint.
        const missing = yield* svc(["sandbox", "get", "sbx_00000000000000000000000000"])
        expect(missing.code).toBe(1)
        expect(missing.stderr).toMatch(/^error (not_found|invalid_request): /)
      }),
    300_000
  )

  it.effect(
    "svc mcp: the MCP tools over stdio from the installed bundle (its MCP SDK chunk), with the official client",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        const { home, prefix } = yield* installPacked
        const client = new Client({ name: "svc-test", version: "0.0.0" })
        yield* Effect.acquireRelease(
          Effect.promise(() =>
            client.connect(
              new StdioClientTransport({
                command: Path.join(prefix, "bin/svc"),
                args: ["mcp"],
                cwd: home,
                env: { PATH, HOME: home, SVC_API_URL: env.base, SVC_API_KEY: env.org.token }
              })
            )
          ),
          () => Effect.promise(() => client.close())
        )
        const { tools } = yield* Effect.promise(() => client.listTools())
        expect(tools.map((t) => t.name).sort()).toEqual(TOOLS)
        const result = yield* Effect.promise(() => client.callTool({ name: "list_sandboxes", arguments: {} }))
        const content = result.content as ReadonlyArray<{ text: string }>
        expect(ok({ isError: result.isError === true, text: content[0]!.text })).toHaveProperty("rows")
      }).pipe(Effect.scoped),
    300_000
  )
})
