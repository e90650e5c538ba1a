/**
 * What the repository's `svc` loads: `svc --help` and a user command load the client (the SDK,
 * the domain schemas, `effect`) and no server package; an operator command loads its modules
 * when it runs. Every module Node loads is noted by a `module.registerHooks` hook, so a static
 * import of the dev stack or a role anywhere on the client's path shows.
 */
import { describe, expect, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const root = Path.resolve(import.meta.dirname, "../../..")
const MAIN = Path.join(root, "apps/cli/src/main.ts")

/** The workspace's packages the client may load: the SDK and what it is built from. */
const CLIENT_PACKAGES = new Set(["packages/sdk", "packages/domain", "packages/config", "apps/cli"])

const HOOK = `
import { registerHooks } from "node:module"
import { appendFileSync } from "node:fs"
registerHooks({
  load(url, context, next) {
    appendFileSync(process.env.SVC_TEST_LOADED, url + "\\n")
    return next(url, context)
  }
})
`

/** `node main.ts args...`; the workspace's files it loaded (relative to the repository) and its output. */
const loaded = (args: ReadonlyArray<string>, env: Record<string, string> = {}) => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-cli-loading-"))
  const hook = Path.join(dir, "hook.mjs")
  const list = Path.join(dir, "loaded.txt")
  Fs.writeFileSync(hook, HOOK)
  Fs.writeFileSync(list, "")
  return new Promise<{ code: number; stdout: string; stderr: string; files: ReadonlyArray<string> }>((resolve) => {
    execFile(
      process.execPath,
      ["--import", hook, MAIN, ...args],
      { env: { PATH: "/usr/bin:/bin", SVC_STATE_DIR: dir, SVC_TEST_LOADED: list, ...env }, timeout: 60_000 },
      (error, stdout, stderr) => {
        const files = Fs.readFileSync(list, "utf8").split("\n")
          .filter((url) => url.startsWith("file:"))
          .map((url) => Fs.realpathSync(fileURLToPath(url)))
          .filter((file) => file.startsWith(root + "/") && !file.includes("/node_modules/"))
          .map((file) => Path.relative(root, file))
        Fs.rmSync(dir, { recursive: true, force: true })
        resolve({ code: error ? typeof error.code === "number" ? error.code : -1 : 0, stdout, stderr, files })
      }
    )
  })
}

/** `packages/<name>` or `apps/<name>` of a file. */
const packageOf = (file: string) => file.split("/").slice(0, 2).join("/")

describe("what svc loads", () => {
  it("svc --help: the client only, the operator's commands listed but not loaded", async () => {
    const run = await loaded(["--help"])
    expect(run.code, run.stderr).toBe(0)
    // Listed: the user's commands and the operator's.
    for (const name of ["whoami", "sandbox", "dev", "api", "runtime", "dispatcher", "agent"]) {
      expect(run.stdout).toMatch(new RegExp(`\\n {2}${name} `))
    }
    expect(run.files).toContain("apps/cli/src/main.ts")
    expect(run.files).toContain("packages/sdk/src/index.ts")
    expect(run.files.filter((f) => !CLIENT_PACKAGES.has(packageOf(f)))).toEqual([])
    for (const heavy of ["Commands/Dev.ts", "Platform.ts", "Operator.ts", "Config.ts"]) {
      expect(run.files).not.toContain(`apps/cli/src/${heavy}`)
    }
  })

  it("a user command (svc whoami, the API unreachable): the client only", async () => {
    const run = await loaded(["whoami"], { SVC_API_URL: "http://127.0.0.1:9", SVC_API_KEY: "svc_live_not_a_key" })
    expect(run.code).toBe(1)
    expect(run.stderr).toMatch(/^error network_error: /)
    expect(run.files.filter((f) => !CLIENT_PACKAGES.has(packageOf(f)))).toEqual([])
  })

  it("an operator command loads its modules when it runs: svc org create reaches the database", async () => {
    // Nothing listens on port 9: the command fails, after loading the identity services.
    const run = await loaded(["org", "create", "acme"], { DATABASE_URL: "postgres://postgres@127.0.0.1:9/postgres" })
    expect(run.code).not.toBe(0)
    expect(run.files).toContain("apps/cli/src/Operator.ts")
    expect(run.files.some((f) => f.startsWith("packages/auth/"))).toBe(true)
    expect(run.files.some((f) => f.startsWith("packages/db/"))).toBe(true)
  }, 60_000)
})
