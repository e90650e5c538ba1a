/**
 * The SDK as a user gets it: built, packed with `npm pack`, installed with `npm install
 * <tarball>` into a project in the system's temporary folder (outside the workspace: no
 * TypeScript, no workspace packages, `effect` from the npm registry), and used from a plain
 * `.mjs` file run by node against a real stack (the API, the runtime, a real agent).
 */
import { expect, layer } from "@effect/vitest"
import { Env, EnvLayer } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { afterAll } from "vitest"

const run = promisify(execFile)
const SDK = Path.resolve(import.meta.dirname, "..")

/** Builds, packs and installs the SDK into a fresh project, once for the file's tests; its folder. */
let installing: Promise<string> | undefined
const installPacked = Effect.promise(() =>
  installing ??= (async () => {
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
  })()
)
afterAll(async () => {
  if (installing !== undefined) Fs.rmSync(await installing, { recursive: true, force: true })
})

/** Runs `program` as main.mjs of the installed project against the stack; its stdout's JSON. */
const runProgram = (name: string, program: string) =>
  Effect.gen(function*() {
    const env = yield* Env
    const project = yield* installPacked
    Fs.writeFileSync(Path.join(project, name), program)
    const { stdout } = yield* Effect.promise(() =>
      run(process.execPath, [name], {
        cwd: project,
        env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", SVC_API_URL: env.base, SVC_API_KEY: env.org.token },
        timeout: 240_000
      })
    )
    return JSON.parse(stdout)
  })

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
        const project = yield* installPacked
        // Installed as a package, not linked to the workspace: no TypeScript sources, one dependency.
        const installed = Path.join(project, "node_modules/@svc/sdk")
        expect(Fs.lstatSync(installed).isSymbolicLink()).toBe(false)
        expect(Fs.existsSync(Path.join(installed, "index.d.ts"))).toBe(true)
        expect(Fs.readdirSync(installed).some((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))).toBe(false)
        expect(Fs.existsSync(Path.join(project, "node_modules/effect/package.json"))).toBe(true)
        expect(Object.keys(JSON.parse(Fs.readFileSync(Path.join(installed, "package.json"), "utf8")).dependencies))
          .toEqual(["effect"])

        const out = yield* runProgram("main.mjs", PROGRAM)

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

/**
 * The second program: a sandbox's background processes (start, list, get, logs, the followed
 * output as an async iterator, kill, wait), streamed exec as an iterator, the terminal over the
 * /terminal WebSocket (Node's own WebSocket), and waits that follow /v1/events (with a `fetch`
 * that records each request, and one whose event stream is down: the poll fallback).
 */
const PROCESSES_PROGRAM = `
import { Process, Svc, SvcError } from "@svc/sdk"

const out = {}
const requests = []
const recording = (input, init) => {
  requests.push((init?.method ?? "GET") + " " + new URL(String(input)).pathname)
  return fetch(input, init)
}
const svc = new Svc({ fetch: recording })
const text = (bytes) => new TextDecoder().decode(bytes)
const failure = async (promise) => {
  try {
    await promise
    return "no error"
  } catch (e) {
    return { isSvcError: e instanceof SvcError, status: e.status, code: e.code }
  }
}

// Waiting through events: the stream is followed, the record read once, then once per event of it.
const seen = svc.events({ events: ["sandbox.state_updated"] })
await seen.connected
const sandbox = await svc.sandboxes.create({ name: "sdk-processes" })
out.state = sandbox.state
const mine = []
for await (const e of seen) {
  if (e.data.sandbox_id !== sandbox.id) continue
  mine.push(e.data.state)
  if (e.data.state === "running") break
}
out.stateEvents = mine
out.followedEvents = requests.some((r) => r === "GET /v1/events")
out.recordReads = requests.filter((r) => r === "GET /v1/sandboxes/" + sandbox.id).length

// A background process that keeps running: its pid, in the list, its output followed, then killed.
const sleeper = await sandbox.processes.start("echo started; echo warn >&2; exec sleep 300")
out.started = { isProcess: sleeper instanceof Process, pid: sleeper.pid, state: sleeper.state }
out.listed = (await sandbox.processes.list()).map((p) => p.pid + ":" + p.state)
const followed = []
for await (const chunk of sleeper.output({ follow: true })) {
  followed.push(chunk.type + ":" + text(chunk.data))
  if (followed.join("").includes("started")) break // leaving the loop closes the stream
}
out.followed = followed
await sleeper.kill("TERM")
await sleeper.wait()
out.killed = { state: sleeper.state, exit_code: sleeper.exitCode, reason: sleeper.record.reason }
out.logs = await sandbox.processes.logs(sleeper.pid)
out.killAgain = await failure(sleeper.kill("KILL"))
out.missing = await failure(sandbox.processes.get(999999))

// One that ends on its own, its output followed to the end (the exit last).
const counter = await sandbox.processes.start(["sh", "-c", "for i in 1 2 3; do echo $i; done; exit 4"])
const chunks = []
for await (const chunk of counter.output({ follow: true })) chunks.push(chunk)
out.counted = chunks.filter((c) => c.type === "stdout").map((c) => text(c.data)).join("")
out.counterExit = chunks.at(-1)
out.counterGot = (await sandbox.processes.get(counter.pid)).record

// Its stdin.
const cat = await sandbox.processes.start("cat", { stdin: true })
await cat.writeStdin("fed through stdin\\n")
await cat.closeStdin()
await cat.wait()
out.cat = { exit_code: cat.exitCode, stdout: (await cat.logs()).stdout }

// Streamed exec as an iterator.
const streamed = []
for await (const chunk of sandbox.execStream(["sh", "-c", "echo a; echo b >&2; exit 2"])) {
  streamed.push(chunk.type === "exit" ? "exit:" + chunk.exit_code : chunk.type + ":" + text(chunk.data))
}
out.execStream = streamed

// The terminal: a shell in a PTY; what it prints arrives as bytes; its exit code at the end.
const terminal = await sandbox.terminal({ cols: 100, rows: 30 })
let screen = ""
terminal.onData((bytes) => (screen += text(bytes)))
terminal.resize(120, 40)
terminal.write("echo hi from the $(echo terminal); stty size; exit 7\\n")
out.terminalExit = await terminal.exited
out.terminalScreen = screen

// The event stream down (a proxy refusing it): the wait polls instead and still resolves.
const noEvents = new Svc({
  fetch: (input, init) =>
    new URL(String(input)).pathname === "/v1/events"
      ? Promise.resolve(new Response(JSON.stringify({ error: "down", code: "unavailable" }), { status: 503 }))
      : fetch(input, init)
})
const stopped = await noEvents.sandboxes.get(sandbox.id).then((s) => s.stop())
out.polledStop = stopped.state
out.terminalStopped = await failure(stopped.terminal())

await sandbox.delete({ wait: true })
out.deleted = sandbox.state

// An app's wait: woken by its replicas' sandbox events.
const app = await svc.apps.create({ name: "sdk-app", template: "base", cmd: ["sleep", "600"], replicas: 1 })
const running = await svc.apps.waitUntilRunning(app.id)
out.app = { state: running.state, ready: running.ready_replicas, sandboxes: running.sandbox_ids.length }
await svc.apps.delete(app.id)
console.log(JSON.stringify(out))
`

layer(EnvLayer, { excludeTestServices: true, timeout: 400_000 })("the packed SDK: processes and the terminal", (it) => {
  it.effect(
    "processes (start, list, follow, kill, wait, logs, stdin), exec as an iterator, the terminal, waits on events",
    () =>
      Effect.gen(function*() {
        const out = yield* runProgram("processes.mjs", PROCESSES_PROGRAM)

        expect(out.state).toBe("running")
        expect(out.stateEvents).toEqual(["starting", "running"])
        // Woken by its events: the stream was followed, and the record read once before and once
        // per event (the 5 s idle read may add one on a slow machine; polling reads it many times).
        expect(out.followedEvents).toBe(true)
        expect(out.recordReads).toBeGreaterThanOrEqual(2)
        expect(out.recordReads).toBeLessThanOrEqual(out.stateEvents.length + 2)

        expect(out.started).toMatchObject({ isProcess: true, state: "running" })
        expect(out.listed).toContain(`${out.started.pid}:running`)
        expect(out.followed.join("")).toContain("stdout:started\n")
        expect(out.killed).toEqual({ state: "exited", exit_code: 143, reason: "killed" })
        expect(out.logs).toMatchObject({ stdout: "started\n", stderr: "warn\n" })
        expect(out.logs.exit).toMatchObject({ type: "exit", exit_code: 143, reason: "killed" })
        expect(out.killAgain).toEqual({ isSvcError: true, status: 409, code: "conflict" })
        expect(out.missing).toEqual({ isSvcError: true, status: 404, code: "not_found" })

        expect(out.counted).toBe("1\n2\n3\n")
        expect(out.counterExit).toMatchObject({ type: "exit", exit_code: 4, reason: "exited" })
        expect(out.counterGot).toMatchObject({ state: "exited", exit_code: 4, reason: "exited" })
        expect(out.cat).toEqual({ exit_code: 0, stdout: "fed through stdin\n" })

        expect(out.execStream).toEqual(["stdout:a\n", "stderr:b\n", "exit:2"])

        expect(out.terminalExit).toBe(7)
        expect(out.terminalScreen).toContain("hi from the terminal")
        expect(out.terminalScreen).toContain("40 120")
        // Refused before the upgrade: the API's own answer, as for any call.
        expect(out.terminalStopped).toMatchObject({ isSvcError: true, status: 409, code: "conflict" })

        expect(out.polledStop).toBe("stopped")
        expect(out.deleted).toBe("deleted")
        expect(out.app).toEqual({ state: "running", ready: 1, sandboxes: 1 })
      }),
    300_000
  )
})
