/**
 * No secret in plain sight (issue 9, item 6): random canary values given as a sandbox's env at
 * create and as an exec's env, through the real API, the runtime and two real agents (one
 * cold-boots, one adopts a warm pool entry). Each exec prints its canary, which proves the value
 * arrived; then the canaries are searched for, as text, hex and base64, and must be absent from:
 * - every row of every table of the test's database, and that database's files and the server's
 *   WAL on disk (deleted rows linger there);
 * - every message of every JetStream stream of the test's prefix, and those streams' files on
 *   disk (a deleted message may linger there);
 * - every file under both agents' data dirs (records, journal, the sandboxes' own file systems);
 * - every log line of the API, runtime and agents.
 * And, while a long exec runs, from every process's command line and from the environment of
 * every process outside the sandbox (the exec's own process inside has it: that is the delivery).
 */
import { expect, layer } from "@effect/vitest"
import { startAgent as startAgentFixture } from "@svc/agent/testing/Agent"
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import type { OrgId } from "@svc/domain/Ids"
import * as Runtime from "@svc/runtime/Runtime"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Duration, Effect, Fiber, Layer, Logger, References } from "effect"
import { HttpRouter } from "effect/http"
import { SqlClient } from "effect/sql"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import * as Server from "../../src/Server.ts"
import {
  type Answer,
  call,
  eventually,
  Identity,
  makeHost,
  startAgent,
  type TestHost
} from "../../testing/Sandboxes.ts"

const TEST_STARTED = Date.now()

class Stack extends Context.Service<Stack, {
  readonly base: string
  readonly prefix: string
  readonly org: { readonly id: OrgId; readonly token: string }
  /** `local`: cold boots; `pooled`: a warm pool of one, creates adopt it. */
  readonly hosts: { readonly local: TestHost; readonly pooled: TestHost }
  readonly logs: ReadonlyArray<string>
}>()("SandboxesEnvCanaries.test/Stack") {}

const StackLayer = Layer.unwrap(Effect.gen(function*() {
  const logs: Array<string> = []
  // Every log line of every role, at every level, request logs included.
  const captureLogs = Layer.mergeAll(
    Logger.layer([Logger.map(Logger.formatLogFmt, (line) => void logs.push(String(line)))], {
      mergeWithExisting: false
    }),
    Layer.succeed(References.MinimumLogLevel, "Trace")
  )
  return Layer.effect(
    Stack,
    Effect.gen(function*() {
      const base = yield* serve(HttpRouter.serve(Server.Routes, { disableListenLog: true }))
      const identity = yield* Identity
      const local = yield* makeHost
      yield* startAgent(local, { region: "local" })
      const pooled = yield* makeHost
      yield* startAgentFixture(pooled, {
        region: "pooled",
        poolSize: 1,
        capacity: { cpu: 64, ramMb: 64 * 1024, diskGb: 500 }
      })
      const server = yield* TestNats.TestNatsServer
      return { base, prefix: server.prefix, org: yield* identity.org("secrets"), hosts: { local, pooled }, logs }
    })
  ).pipe(
    Layer.provideMerge(Layer.mergeAll(
      Runtime.make({ supervisor: { intervalMs: 200, transitionTimeoutMs: 30_000 } }),
      Identity.layer
    )),
    Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer)),
    Layer.provide(captureLogs)
  )
}))

// ---------------------------------------------------------------------------------------------
// Canaries and where they might be

/** Random, and only of characters no encoder escapes (JSON, shell, URL). */
const canary = (what: string) => `canary-${what}-${randomBytes(12).toString("hex")}`

/**
 * The byte patterns a value takes when stored: its text, hex (Postgres bytea), and base64 or
 * base64url at each of the three alignments it can have inside a longer encoded text (only the
 * characters that depend on the value alone, so a match is certain).
 */
const patternsOf = (value: string): ReadonlyArray<Buffer> => {
  const raw = Buffer.from(value, "utf8")
  const patterns = [raw, Buffer.from(raw.toString("hex"))]
  for (const shift of [0, 1, 2]) {
    const encoded = Buffer.concat([Buffer.alloc(shift), raw]).toString("base64")
    const inner = encoded.slice([0, 2, 3][shift], -4)
    patterns.push(Buffer.from(inner), Buffer.from(inner.replaceAll("+", "-").replaceAll("/", "_")))
  }
  return patterns
}

/** Which of the canaries a blob holds (empty: none). */
const found = (blob: Uint8Array, canaries: ReadonlyArray<string>): ReadonlyArray<string> => {
  const bytes = Buffer.from(blob.buffer, blob.byteOffset, blob.byteLength)
  return canaries.filter((c) => patternsOf(c).some((p) => bytes.includes(p)))
}

interface Hit {
  readonly where: string
  readonly canaries: ReadonlyArray<string>
}

/** Regular files under `dir`, recursively, without following links; `keep` filters paths. */
const filesUnder = async (dir: string, keep: (path: string) => boolean = () => true): Promise<Array<string>> => {
  const out: Array<string> = []
  const walk = async (current: string) => {
    let entries: Array<FsSync.Dirent>
    try {
      entries = await Fs.readdir(current, { withFileTypes: true })
    } catch {
      return
    }
    for (const entry of entries) {
      const path = NodePath.join(current, entry.name)
      if (entry.isDirectory()) await walk(path)
      else if (entry.isFile() && keep(path)) out.push(path)
    }
  }
  await walk(dir)
  return out
}

const searchFiles = (paths: ReadonlyArray<string>, canaries: ReadonlyArray<string>) =>
  Effect.promise(async () => {
    const hits: Array<Hit> = []
    for (const path of paths) {
      // Gone meanwhile (a temporary file, a recycled WAL segment): nothing to find in it.
      const bytes = await Fs.readFile(path).catch(() => undefined)
      if (bytes === undefined) continue
      const which = found(bytes, canaries)
      if (which.length > 0) hits.push({ where: path, canaries: which })
    }
    return hits
  })

/** Every row of every table of the test's database, as Postgres prints it (bytea as hex). */
const searchTables = (canaries: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const tables = yield* sql<{ schema: string; name: string }>`
      SELECT table_schema AS schema, table_name AS name FROM information_schema.tables
      WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')`
    expect(tables.map((t) => t.name)).toEqual(
      expect.arrayContaining(["outbox", "sandboxes", "idempotency_keys", "audit_log"])
    )
    const hits: Array<Hit> = []
    for (const table of tables) {
      const quoted = `"${table.schema.replaceAll("\"", "\"\"")}"."${table.name.replaceAll("\"", "\"\"")}"`
      const rows = yield* sql.unsafe<{ row: string }>(`SELECT t::text AS row FROM ${quoted} t`)
      const which = found(Buffer.from(rows.map((r) => r.row).join("\n")), canaries)
      if (which.length > 0) hits.push({ where: `table ${quoted}`, canaries: which })
    }
    return hits
  }).pipe(Effect.orDie)

/**
 * The database's files and the server's WAL written since this file started, when the server
 * runs on this machine (the test run's own does): a deleted row stays in both for a while.
 */
const searchDatabaseFiles = (canaries: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`CHECKPOINT`
    const [setting] = yield* sql<{ dir: string }>`SELECT current_setting('data_directory') AS dir`
    const [db] = yield* sql<{ oid: number }>`SELECT oid::int AS oid FROM pg_database WHERE datname = current_database()`
    const dataDir = setting!.dir
    expect(FsSync.existsSync(dataDir), `the run's Postgres keeps its data on this machine (${dataDir})`).toBe(true)
    const recent = (path: string) =>
      (FsSync.statSync(path, { throwIfNoEntry: false })?.mtimeMs ?? 0) >= TEST_STARTED - 1_000
    const files = [
      ...(yield* Effect.promise(() => filesUnder(NodePath.join(dataDir, "base", String(db!.oid))))),
      ...(yield* Effect.promise(() => filesUnder(NodePath.join(dataDir, "pg_wal"), recent)))
    ]
    return yield* searchFiles(files, canaries)
  }).pipe(Effect.orDie)

/** Every message still in every stream and bucket of the test's prefix: subject, headers, data. */
const searchStreams = (prefix: string, canaries: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const nats = yield* Nats
    return yield* Effect.promise(async () => {
      const hits: Array<Hit> = []
      const names: Array<string> = []
      for await (const name of nats.jsm.streams.names()) {
        if (name.startsWith(`${prefix}_`) || name.startsWith(`KV_${prefix}_`)) names.push(name)
      }
      for (const name of names) {
        const info = await nats.jsm.streams.info(name)
        for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
          const msg = await nats.jsm.streams.getMessage(name, { seq }).catch(() => null)
          if (msg === null) continue
          const headers = msg.header
            ? [...msg.header.keys()].map((k) => `${k}: ${msg.header.values(k).join(",")}`).join("\n")
            : ""
          const which = found(
            Buffer.concat([Buffer.from(`${msg.subject}\n${headers}\n`), Buffer.from(msg.data)]),
            canaries
          )
          if (which.length > 0) hits.push({ where: `stream ${name} seq ${seq} (${msg.subject})`, canaries: which })
        }
      }
      return { hits, names }
    })
  })

/** The JetStream store directory of the run's NATS server, when it runs on this machine. */
const natsStoreDir = (): string | undefined => {
  const url = process.env.NATS_URL ?? process.env.SVC_TEST_NATS_URL
  if (url === undefined) return undefined
  const port = new URL(url.split(",")[0]!.replace(/^nats:/, "http:")).port
  for (const pid of FsSync.readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    let argv: Array<string>
    try {
      argv = FsSync.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")
    } catch {
      continue
    }
    if (!NodePath.basename(argv[0] ?? "").startsWith("nats-server")) continue
    const at = (flag: string) => (argv.indexOf(flag) >= 0 ? argv[argv.indexOf(flag) + 1] : undefined)
    if (at("-p") === port && at("-sd") !== undefined) return at("-sd")
  }
  return undefined
}

/** The files of the test's streams in the server's store (a consumed message may linger in them). */
const searchStreamFiles = (prefix: string, canaries: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const dir = natsStoreDir()
    expect(dir, "the run's NATS server runs on this machine, with its store in -sd").toBeDefined()
    const ours = (path: string) => path.includes(`/streams/${prefix}_`) || path.includes(`/streams/KV_${prefix}_`)
    return yield* searchFiles(yield* Effect.promise(() => filesUnder(dir!, ours)), canaries)
  })

// ---------------------------------------------------------------------------------------------
// Calls

const api = (method: string, path: string, options: Parameters<typeof call>[3] = {}) =>
  Effect.flatMap(
    Effect.service(Stack),
    (stack) => call(stack.base, method, path, { token: stack.org.token, ...options })
  )

const expectStatus = (res: Answer, status: number) => expect(res.status, res.text).toBe(status)

const waitRunning = (id: string) =>
  Effect.gen(function*() {
    const res = yield* eventually(
      api("GET", `/v1/sandboxes/${id}`),
      (r) => r.json?.state === "running" || r.json?.state === "error",
      Duration.seconds(60)
    )
    expect(res.json.state, res.text).toBe("running")
    return res.json as Record<string, any>
  })

const exec = (id: string, body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const res = yield* api("POST", `/v1/sandboxes/${id}/exec`, { body })
    expectStatus(res, 200)
    return res.json as { exit_code: number; stdout: string; stderr: string }
  })

/** Prints the named variables, `|`-separated. */
const printVars = (...names: ReadonlyArray<string>) => ["sh", "-c", names.map((n) => `printf '%s|' "$${n}"`).join("; ")]

const describeHits = (hits: ReadonlyArray<Hit>) => hits.map((h) => `${h.where}: ${h.canaries.join(", ")}`).join("\n")

/**
 * A search for the canaries and a control value that is stored in every place searched (the
 * sandbox's id): finding the control shows the search read what is there; no canary may be found.
 */
const expectOnlyControl = (place: string, hits: ReadonlyArray<Hit>, control: string) => {
  expect(hits.some((h) => h.canaries.includes(control)), `${place}: the control value was found`).toBe(true)
  const leaks = hits.map((h) => ({ ...h, canaries: h.canaries.filter((c) => c !== control) })).filter((h) =>
    h.canaries.length > 0
  )
  expect(leaks, `${place}:\n${describeHits(leaks)}`).toEqual([])
}

layer(StackLayer, { excludeTestServices: true, timeout: 180_000 })(
  "sandbox env: never stored or logged in the clear",
  (it) => {
    it.effect("canaries in a sandbox's env and an exec's env reach the sandbox and are in no table, stream, file or log", () =>
      Effect.gen(function*() {
        const stack = yield* Stack
        const sandboxCanary = canary("sandbox")
        const pooledCanary = canary("pooled")
        const execCanary = canary("exec")
        const canaries = [sandboxCanary, pooledCanary, execCanary]

        // Cold boot, with an Idempotency-Key: its stored entry must not hold the env either.
        const body = { region: "local", env: { SVC_CANARY: sandboxCanary, OTHER: "x" } }
        const headers = { "idempotency-key": `secrets-${randomBytes(4).toString("hex")}` }
        const created = yield* api("POST", "/v1/sandboxes", { body, headers })
        expectStatus(created, 201)
        expect(created.text).not.toContain(sandboxCanary)
        const replayed = yield* api("POST", "/v1/sandboxes", { body, headers })
        expectStatus(replayed, 200)
        expect(replayed.json.id).toBe(created.json.id)
        const id = created.json.id as string
        const running = yield* waitRunning(id)
        expect(running.hostId).toBe(stack.hosts.local.hostId)

        // Adopted from the warm pool: the driver rewrites the record with the env.
        const pooled = yield* api("POST", "/v1/sandboxes", {
          body: { region: "pooled", env: { SVC_CANARY: pooledCanary } }
        })
        expectStatus(pooled, 201)
        const pooledId = pooled.json.id as string
        yield* waitRunning(pooledId)

        // Delivered: the sandbox's env, and an exec's env on top of it.
        expect((yield* exec(id, { cmd: printVars("SVC_CANARY", "OTHER") })).stdout).toBe(`${sandboxCanary}|x|`)
        expect(
          (yield* exec(id, { cmd: printVars("SVC_CANARY", "EXEC_CANARY"), env: { EXEC_CANARY: execCanary } })).stdout
        )
          .toBe(`${sandboxCanary}|${execCanary}|`)
        expect((yield* exec(pooledId, { cmd: printVars("SVC_CANARY") })).stdout).toBe(`${pooledCanary}|`)

        // Stopped and started: the env comes back from the host's record.
        expectStatus(yield* api("POST", `/v1/sandboxes/${id}/stop`), 202)
        yield* eventually(api("GET", `/v1/sandboxes/${id}`), (r) => r.json?.state === "stopped", Duration.seconds(30))
        expectStatus(yield* api("POST", `/v1/sandboxes/${id}/start`), 202)
        yield* waitRunning(id)
        expect((yield* exec(id, { cmd: printVars("SVC_CANARY") })).stdout).toBe(`${sandboxCanary}|`)

        // The API never answers it back.
        for (const path of [`/v1/sandboxes/${id}`, `/v1/sandboxes/${pooledId}`, "/v1/sandboxes", "/v1/audit"]) {
          const res = yield* api("GET", path)
          expect(found(res.bytes, canaries), `${path}: ${res.text.slice(0, 300)}`).toEqual([])
        }

        const searched = [...canaries, id]
        expectOnlyControl("tables", yield* searchTables(searched), id)
        expectOnlyControl("database files", yield* searchDatabaseFiles(searched), id)

        const streams = yield* searchStreams(stack.prefix, searched)
        // The actor's mailbox, the agents' commands, the events, the hosts bucket at least.
        expect(streams.names.length).toBeGreaterThanOrEqual(4)
        expectOnlyControl("streams", streams.hits, id)
        expectOnlyControl("stream files", yield* searchStreamFiles(stack.prefix, searched), id)

        // Not the disk images: each is a sandbox's own file system (GiBs, sparse), or a blank one.
        const notADisk = (path: string) => !path.endsWith("/disk.img") && !path.includes("/disk-stock/")
        const hostFiles = yield* Effect.promise(async () => [
          ...(await filesUnder(stack.hosts.local.dataDir, notADisk)),
          ...(await filesUnder(stack.hosts.pooled.dataDir, notADisk))
        ])
        expect(hostFiles.some((f) => f.endsWith(`/sandboxes/${id}/sandbox.json`))).toBe(true)
        expect(hostFiles.some((f) => f.endsWith(`/sandboxes/${pooledId}/sandbox.json`))).toBe(true)
        expectOnlyControl("agents' data dirs", yield* searchFiles(hostFiles, searched), id)

        // The request log names the sandbox (its URLs): the control.
        const logHits = stack.logs.flatMap((line, i) => {
          const which = found(Buffer.from(line), searched)
          return which.length > 0 ? [{ where: `log line ${i}: ${line.slice(0, 300)}`, canaries: which }] : []
        })
        expectOnlyControl("logs", logHits, id)
      }))

    it.effect("while a long exec runs, no process shows a canary in its command line, none outside the sandbox in its environment", () =>
      Effect.gen(function*() {
        const stack = yield* Stack
        const sandboxCanary = canary("ps-sandbox")
        const execCanary = canary("ps-exec")
        const canaries = [sandboxCanary, execCanary]
        const created = yield* api("POST", "/v1/sandboxes", {
          body: { region: "local", env: { SVC_CANARY: sandboxCanary } }
        })
        expectStatus(created, 201)
        const id = created.json.id as string
        yield* waitRunning(id)
        const run = JSON.parse(
          FsSync.readFileSync(NodePath.join(stack.hosts.local.dataDir, "sandboxes", id, "run.json"), "utf8")
        )
        const sandboxPidNs = FsSync.readlinkSync(`/proc/${run.pid}/ns/pid`)

        // The exec names itself with a marker ($0 of its shell) so that the test sees it running.
        const marker = `marker-${randomBytes(6).toString("hex")}`
        const running = yield* Effect.forkChild(exec(id, {
          cmd: ["sh", "-c", `sleep 3; printf '%s|%s|' "$SVC_CANARY" "$EXEC_CANARY"`, marker],
          env: { EXEC_CANARY: execCanary }
        }))
        const read = (pid: string, file: string) => {
          try {
            return FsSync.readFileSync(`/proc/${pid}/${file}`)
          } catch {
            return undefined
          }
        }
        const pids = () => FsSync.readdirSync("/proc").filter((n) => /^\d+$/.test(n))
        yield* eventually(
          Effect.sync(() => pids().some((pid) => read(pid, "cmdline")?.includes(marker) === true)),
          (seen) => seen,
          Duration.seconds(20)
        )
        const hits: Array<Hit> = []
        let processes = 0
        for (const pid of pids()) {
          const cmdline = read(pid, "cmdline")
          if (cmdline === undefined) continue
          processes++
          const inCmdline = found(cmdline, canaries)
          if (inCmdline.length > 0) {
            hits.push({
              where: `pid ${pid} cmdline: ${cmdline.toString("utf8").replaceAll("\0", " ").slice(0, 200)}`,
              canaries: inCmdline
            })
          }
          let ns: string | undefined
          try {
            ns = FsSync.readlinkSync(`/proc/${pid}/ns/pid`)
          } catch {
            ns = undefined
          }
          // Inside the sandbox the exec's own process holds its env: that is how it gets there.
          if (ns === sandboxPidNs) continue
          const environ = read(pid, "environ")
          const inEnviron = environ === undefined ? [] : found(environ, canaries)
          if (inEnviron.length > 0) {
            hits.push({ where: `pid ${pid} environ (${cmdline.toString("utf8").split("\0")[0]})`, canaries: inEnviron })
          }
        }
        const result = yield* Fiber.join(running)
        expect(result.stdout).toBe(`${sandboxCanary}|${execCanary}|`)
        expect(processes).toBeGreaterThan(10)
        expect(hits, describeHits(hits)).toEqual([])
      }))
  }
)
