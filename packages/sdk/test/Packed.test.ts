/**
 * The SDK as a user gets it: built, packed with `npm pack`, installed with `npm install
 * <tarball>` into a project in the system's temporary folder (outside the workspace: no
 * TypeScript, no workspace packages, `effect` from the npm registry), and used from a plain
 * `.mjs` file run by node against a real stack (the API, the runtime, a real agent).
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { Env, EnvLayer } from "../../../apps/api/test/SandboxesEnv.support.ts"

const run = promisify(execFile)
const SDK = Path.resolve(import.meta.dirname, "..")

/** Builds, packs and installs the SDK into a fresh project; its folder. */
const installPacked = Effect.acquireRelease(
  Effect.promise(async () => {
    const project = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-sdk-user-"))
    await run(process.execPath, [Path.join(SDK, "scripts/build.ts")])
    const { stdout } = await run("npm", ["pack", "./dist", "--pack-destination", project, "--json"], { cwd: SDK })
    const tarball = Path.join(project, (JSON.parse(stdout) as Array<{ filename: string }>)[0]!.filename)
    Fs.writeFileSync(
      Path.join(project, "package.json"),
      JSON.stringify({ name: "sdk-user", private: true, type: "module" })
    )
    await run("npm", ["install", "--no-audit", "--no-fund", tarball], { cwd: project, timeout: 180_000 })
    return project
  }),
  (project) => Effect.sync(() => Fs.rmSync(project, { recursive: true, force: true }))
)

/** The user's program: every step's outcome as one JSON line on stdout. */
const PROGRAM = `
import { Svc, SvcError, verifyWebhook } from "@svc/sdk"

const out = {}
const svc = new Svc() // SVC_API_URL, SVC_API_KEY

// Followed before anything happens: nothing after \`connected\` is missed.
const events = svc.events()
await events.connected

const sandbox = await svc.sandboxes.create({ name: "sdk-user" })
out.created = { id: sandbox.id, state: sandbox.state }

out.exec = await sandbox.exec(["sh", "-c", "echo hello; echo oops >&2; exit 3"])
const pieces = []
out.streamed = await sandbox.exec("printf 'one\\\\ntwo\\\\n'", { onStdout: (text) => pieces.push(text) })
out.pieces = pieces.join("")

await sandbox.files.write("/tmp/note.txt", "written by the sdk")
await sandbox.files.write("/tmp/bytes.bin", new Uint8Array([0, 1, 2, 255]))
out.read = new TextDecoder().decode(await sandbox.files.read("/tmp/note.txt"))
out.bytes = Array.from(await sandbox.files.read("/tmp/bytes.bin"))
out.listing = (await sandbox.files.list("/tmp")).map((e) => e.name + ":" + e.type).sort()

const page = await svc.sandboxes.list()
out.listed = page.rows.map((s) => s.id)
out.got = (await svc.sandboxes.get(sandbox.id)).state

const failure = async (promise) => {
  try {
    await promise
    return "no error"
  } catch (e) {
    return { isSvcError: e instanceof SvcError, status: e.status, code: e.code, message: e.message, details: e.details }
  }
}
out.notFound = await failure(svc.sandboxes.get("sbx_" + "0".repeat(sandbox.id.length - 4)))
out.invalid = await failure(svc.sandboxes.create({ cpu: 999, ram_mb: 1 }))
out.unauthenticated = await failure(new Svc({ apiKey: "svc_live_not_a_key" }).sandboxes.list())
out.badFilter = await failure(svc.events({ events: ["sandbox.*"] }).next())

await sandbox.delete({ wait: true })
out.deleted = sandbox.state

const label = (e) => e.event === "sandbox.state_updated" ? e.event + ":" + e.data.state : e.event
const mine = []
for await (const e of events) {
  if (e.data.sandbox_id !== sandbox.id) continue
  mine.push(e)
  if (e.event === "sandbox.deleted") break
}
out.events = mine.map(label)

// Resumed after the first event: the later ones again, in order.
const resumed = []
for await (const e of svc.events({ lastEventId: mine[0].id })) {
  if (e.data.sandbox_id !== sandbox.id) continue
  resumed.push(e.id)
  if (e.event === "sandbox.deleted") break
}
out.resumed = resumed
out.ids = mine.map((e) => e.id)
out.verify = typeof verifyWebhook

console.log(JSON.stringify(out))
`

layer(EnvLayer, { excludeTestServices: true, timeout: 400_000 })("the packed SDK in a plain Node project", (it) => {
  it.effect(
    "create, exec (whole and streamed), files, list, get, SvcError, delete, the events iterator",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        const project = yield* installPacked
        // Installed as a package, not linked to the workspace: no TypeScript sources, one dependency.
        const installed = Path.join(project, "node_modules/@svc/sdk")
        expect(Fs.lstatSync(installed).isSymbolicLink()).toBe(false)
        expect(Fs.existsSync(Path.join(installed, "index.d.ts"))).toBe(true)
        expect(Fs.readdirSync(installed).some((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))).toBe(false)
        expect(Fs.existsSync(Path.join(project, "node_modules/effect/package.json"))).toBe(true)
        expect(Object.keys(JSON.parse(Fs.readFileSync(Path.join(installed, "package.json"), "utf8")).dependencies))
          .toEqual(["effect"])

        Fs.writeFileSync(Path.join(project, "main.mjs"), PROGRAM)
        const { stdout } = yield* Effect.promise(() =>
          run(process.execPath, ["main.mjs"], {
            cwd: project,
            env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", SVC_API_URL: env.base, SVC_API_KEY: env.org.token },
            timeout: 240_000
          })
        )
        const out = JSON.parse(stdout)

        expect(out.created.id).toMatch(/^sbx_/)
        expect(out.created.state).toBe("running")
        expect(out.exec).toMatchObject({ exit_code: 3, stdout: "hello\n", stderr: "oops\n", truncated: false })
        expect(out.exec.duration_ms).toBeGreaterThanOrEqual(0)
        expect(out.streamed).toMatchObject({ exit_code: 0, stdout: "one\ntwo\n", stderr: "" })
        expect(out.pieces).toBe("one\ntwo\n")
        expect(out.read).toBe("written by the sdk")
        expect(out.bytes).toEqual([0, 1, 2, 255])
        expect(out.listing).toEqual(expect.arrayContaining(["note.txt:file", "bytes.bin:file"]))
        expect(out.listed).toContain(out.created.id)
        expect(out.got).toBe("running")

        expect(out.notFound).toMatchObject({ isSvcError: true, status: 404, code: "not_found" })
        expect(out.invalid).toMatchObject({ isSvcError: true, status: 400, code: "invalid_request" })
        // Every invalid field at once, in the error's details.
        expect(out.invalid.details.issues.map((i: { path: string }) => i.path)).toEqual(
          expect.arrayContaining(["cpu", "ram_mb"])
        )
        expect(out.unauthenticated).toMatchObject({ isSvcError: true, status: 401, code: "unauthenticated" })
        expect(out.badFilter).toMatchObject({ isSvcError: true, status: 400, code: "invalid_event_filter" })

        expect(out.deleted).toBe("deleted")
        expect(out.events).toEqual([
          "sandbox.state_updated:starting",
          "sandbox.created",
          "sandbox.state_updated:running",
          "sandbox.state_updated:deleting",
          "sandbox.state_updated:deleted",
          "sandbox.deleted"
        ])
        expect(out.resumed).toEqual(out.ids.slice(1))
        expect(out.verify).toBe("function")
      }),
    300_000
  )
})
