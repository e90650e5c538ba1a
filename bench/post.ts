/**
 * `POST /v1/sandboxes` alone (issue 27: answered ≤ 10 ms p50): the API role in a process of its
 * own against a throwaway NATS and Postgres, with live host records kept fresh by this process
 * (no agent: the creates are placed and answered, nothing starts them, so the machine's CPU goes
 * to the request alone). One create after another on one kept-alive connection, three kinds:
 *   - `base` (a built-in template: nothing to look up);
 *   - an org template (a `ready` row of the org, as `debian-nodejs` in bench/tti.ts);
 *   - the org template with an `Idempotency-Key` (a new key each time).
 * Per kind: the answer's wall time (median, p95), and the CPU of the API process (and its kernel
 * share), of Postgres (every backend) and of NATS per create, over each batch.
 *
 * BENCH_POST_BEFORE=<checkout>: the same with that checkout's API role too, in the same run, on
 * the same database: batches alternate between the two (this checkout's first in odd rounds),
 * and the ratios after / before are of the medians over rounds.
 *
 * BENCH_POST_EVENTS=1: a fourth kind, `GET /v1/events` opened (until the server follows) and
 * closed, what the SDK's wait for `running` opens per create when no other wait shares it.
 *
 * BENCH_POST_CPU_PROF=<dir>: the API roles run with `--cpu-prof` (a profile per role in
 * `<dir>/after`, `<dir>/before`, written when they stop).
 *
 *   npm run bench post     (or: node bench/post.ts; BENCH_POST_N=30 creates per batch, BENCH_POST_ROUNDS=5)
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Effect, Fiber, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Nats } from "../packages/bus/src/Nats.ts"
import { ensureBucket } from "../packages/bus/src/Topology.ts"
import * as Database from "../packages/db/src/Database.ts"
import { makeHostId, makeTemplateId } from "../packages/domain/src/Ids.ts"
import { type HostRecord, HOSTS_BUCKET_SPEC } from "../packages/host-protocol/src/Protocol.ts"
import { mintKey, startRole, stopRoles } from "./lib/ApiRole.ts"
import { findProcess, fmt, processCpuMs, treeCpuMs } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { median, quantile } from "./lib/Stats.ts"

const N = Number(process.env["BENCH_POST_N"] ?? 30)
const ROUNDS = Number(process.env["BENCH_POST_ROUNDS"] ?? 5)
const BEFORE = process.env["BENCH_POST_BEFORE"]
const PROFILE = process.env["BENCH_POST_CPU_PROF"]
const TEMPLATE = "bench-node"
const HOST_ID = makeHostId()
const EVENTS = process.env["BENCH_POST_EVENTS"] === "1"
const KINDS = [
  "base",
  "org template",
  "org template + Idempotency-Key",
  ...(EVENTS ? ["GET /v1/events opened"] as const : [])
] as const
type Kind = typeof KINDS[number]

const [nats, pg] = await Promise.all([startNats(), startPostgres()])
useTestEncryptionKeys()

// One live host with room for every create of the run, its heartbeat kept fresh.
const heartbeat = Effect.gen(function*() {
  const kv = yield* ensureBucket(HOSTS_BUCKET_SPEC)
  const put = Effect.promise(() => {
    const host: HostRecord = {
      hostId: HOST_ID,
      region: "local",
      datacenter: "bench-1",
      version: "bench",
      capacity: { cpu: 1_000_000, ramMb: 1_000_000_000, diskGb: 10_000_000 },
      endpoint: "http://127.0.0.1:9",
      token: "bench",
      heartbeatAt: Date.now(),
      startedAt: Date.now()
    }
    return kv.put(host.hostId, JSON.stringify(host))
  })
  yield* put
  yield* Effect.forkScoped(Effect.repeat(put, Schedule.spaced("1 second")))
  return yield* Effect.never
}).pipe(
  Effect.provideServiceEffect(Nats, Nats.make({ url: nats.url, prefix: "" })),
  Effect.scoped
)
const beating = Effect.runFork(heartbeat)

const sql = <A>(f: (sql: SqlClient.SqlClient) => Effect.Effect<A, unknown, SqlClient.SqlClient>) =>
  Effect.runPromise(
    Effect.gen(function*() {
      return yield* f(yield* SqlClient.SqlClient)
    }).pipe(
      Effect.provide(Database.layerFromUrl(pg.url)),
      Effect.scoped
    ) as Effect.Effect<A, unknown, never>
  )

interface Subject {
  readonly name: "after" | "before"
  readonly url: string
  readonly pid: number
  readonly key: string
}

const env = {
  DATABASE_URL: pg.url,
  NATS_URL: nats.url,
  SVC_ORG_MAX_SANDBOXES: "100000000",
  SVC_ORG_MAX_RUNNING_SANDBOXES: "100000000"
}
const roots = [
  { name: "after" as const, root: new URL("..", import.meta.url).pathname },
  ...(BEFORE !== undefined ? [{ name: "before" as const, root: path.resolve(BEFORE) }] : [])
]
const roles: Array<Awaited<ReturnType<typeof startRole>>> = []
// The roles are this process's children: stopped however it ends.
process.on("exit", () => roles.forEach((role) => role.child.kill("SIGTERM")))
const subjects: Array<Subject> = []
for (const { name, root } of roots) {
  const profile = PROFILE !== undefined ? ["--cpu-prof", `--cpu-prof-dir=${path.join(PROFILE, name)}`] : []
  const role = await startRole([...profile, path.join(root, "apps/api/src/main.ts")], env)
  roles.push(role)
  const key = await mintKey(role.url)
  // The org just signed up: its template, ready, as a build would leave it (no steps, the debian root).
  await sql((sql) =>
    sql`INSERT INTO templates (id, org_id, name, base, root, layers, env, steps, start_cmd, ready_cmd, state,
        host_id, deadline_at, created_at, built_at, pool_size, exposed_ports)
      SELECT ${makeTemplateId()}, id, ${TEMPLATE}, 'debian', 'debian', '[]'::jsonb, '{"BENCH":"1"}'::jsonb,
        '[]'::jsonb, NULL, NULL, 'ready', ${HOST_ID}, now(), now(), now(), 0, '[]'::jsonb
      FROM orgs ORDER BY created_at DESC LIMIT 1`
  )
  subjects.push({ name, url: role.url, pid: role.pid, key })
}
const postgresPid = findProcess((cmd) => cmd.includes(pg.dir) && cmd.includes("postgres"))
const natsPid = findProcess((cmd) => cmd.includes("nats-server") && cmd.includes(` ${new URL(nats.url).port} `))

/** A process's kernel time (stime), ms. */
const systemCpuMs = (pid: number): number => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[12]) * 10
  } catch {
    return 0
  }
}

/**
 * What the SDK's wait for `running` opens first (BENCH_POST_EVENTS=1): the org's event stream,
 * timed until the server says it follows (`: connected`), then closed.
 */
const openEvents = async (s: Subject): Promise<number> => {
  const abort = new AbortController()
  const started = performance.now()
  const res = await fetch(`${s.url}/v1/events?events=sandbox.state_updated,sandbox.deleted`, {
    headers: { authorization: `Bearer ${s.key}`, accept: "text/event-stream" },
    signal: abort.signal
  })
  if (res.status !== 200) throw new Error(`${s.name}: GET /v1/events answered ${res.status}`)
  const reader = res.body!.getReader()
  let text = ""
  while (!text.includes(": connected")) {
    const { done, value } = await reader.read()
    if (done) break
    text += new TextDecoder().decode(value)
  }
  const ms = performance.now() - started
  abort.abort()
  await reader.cancel().catch(() => undefined)
  return ms
}

const createOnce = async (s: Subject, kind: Kind, i: number): Promise<number> => {
  if (kind === "GET /v1/events opened") return openEvents(s)
  const headers: Record<string, string> = {
    authorization: `Bearer ${s.key}`,
    "content-type": "application/json"
  }
  if (kind === "org template + Idempotency-Key") headers["idempotency-key"] = `bench-${s.name}-${Date.now()}-${i}`
  const body = JSON.stringify({ template: kind === "base" ? "base" : TEMPLATE, metadata: { bench: "post" } })
  const started = performance.now()
  const res = await fetch(`${s.url}/v1/sandboxes`, { method: "POST", headers, body })
  await res.arrayBuffer()
  const ms = performance.now() - started
  if (res.status !== 201) throw new Error(`${s.name}: POST answered ${res.status}`)
  return ms
}

interface Batch {
  readonly wall: ReadonlyArray<number>
  readonly apiCpu: number
  /** The API's kernel share of it (stime: its sockets' writes and reads, epoll, the rest in JavaScript). */
  readonly apiSys: number
  readonly pgCpu: number
  readonly natsCpu: number
}
const batches = new Map<string, Array<Batch>>()

// Warm-up: the first creates of each subject and kind compile and prepare what they use.
// The API's mirror of the hosts bucket sees the record within moments.
for (const s of subjects) {
  for (let tries = 0;; tries++) {
    const res = await fetch(`${s.url}/v1/sandboxes`, {
      method: "POST",
      headers: { authorization: `Bearer ${s.key}`, "content-type": "application/json" },
      body: JSON.stringify({ template: "base" })
    })
    const text = await res.text()
    if (res.status === 201) break
    if (tries > 100) throw new Error(`${s.name}: POST answered ${res.status} ${text}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
for (const s of subjects) for (const kind of KINDS) for (let i = 0; i < 5; i++) await createOnce(s, kind, -i - 1)

const loads: Array<number> = []
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? subjects : [...subjects].reverse()
  loads.push(os.loadavg()[0]!)
  for (const kind of KINDS) {
    for (const s of order) {
      const api0 = processCpuMs(s.pid).own
      const sys0 = systemCpuMs(s.pid)
      const pg0 = postgresPid !== undefined ? treeCpuMs(postgresPid) : 0
      const nats0 = natsPid !== undefined ? processCpuMs(natsPid).own : 0
      const wall: Array<number> = []
      for (let i = 0; i < N; i++) wall.push(await createOnce(s, kind, round * N + i))
      const apiCpu = (processCpuMs(s.pid).own - api0) / N
      const apiSys = (systemCpuMs(s.pid) - sys0) / N
      const pgCpu = postgresPid !== undefined ? (treeCpuMs(postgresPid) - pg0) / N : NaN
      const natsCpu = natsPid !== undefined ? (processCpuMs(natsPid).own - nats0) / N : NaN
      const id = `${s.name}|${kind}`
      batches.set(id, [...(batches.get(id) ?? []), { wall, apiCpu, apiSys, pgCpu, natsCpu }])
    }
  }
}
loads.push(os.loadavg()[0]!)

const summary = (name: string, kind: Kind) => {
  const runs = batches.get(`${name}|${kind}`) ?? []
  return {
    p50: median(runs.map((b) => median(b.wall))),
    p95: median(runs.map((b) => quantile(b.wall, 0.95))),
    api: median(runs.map((b) => b.apiCpu)),
    apiSys: median(runs.map((b) => b.apiSys)),
    pg: median(runs.map((b) => b.pgCpu)),
    nats: median(runs.map((b) => b.natsCpu)),
    p50s: runs.map((b) => median(b.wall))
  }
}

console.log(
  `POST /v1/sandboxes one after another (CPU per request, ms): ${ROUNDS} rounds × ${N} per kind and subject, medians over rounds ` +
    `(load average ${fmt(Math.min(...loads), 1)}–${fmt(Math.max(...loads), 1)})`
)
console.log(
  `${"".padEnd(34)}${"p50 ms".padStart(8)}${"p95 ms".padStart(8)}${"API cpu".padStart(9)}${"of it sys".padStart(10)}${
    "PG cpu".padStart(8)
  }${"NATS cpu".padStart(9)}`
)
for (const kind of KINDS) {
  for (const s of subjects) {
    const r = summary(s.name, kind)
    console.log(
      `${`${kind}, ${s.name}`.padEnd(34)}${fmt(r.p50, 1).padStart(8)}${fmt(r.p95, 1).padStart(8)}${
        fmt(r.api, 2).padStart(9)
      }${fmt(r.apiSys, 2).padStart(10)}${fmt(r.pg, 2).padStart(8)}${fmt(r.nats, 2).padStart(9)}   (p50 by round: ${
        r.p50s.map((v) => fmt(v, 1)).join(", ")
      })`
    )
  }
  const after = summary("after", kind)
  const before = BEFORE !== undefined ? summary("before", kind) : undefined
  if (before !== undefined) {
    console.log(
      `${"  after / before".padEnd(34)}${fmt(after.p50 / before.p50, 2).padStart(8)}${
        fmt(after.p95 / before.p95, 2).padStart(8)
      }${fmt(after.api / before.api, 2).padStart(9)}${"".padStart(10)}${fmt(after.pg / before.pg, 2).padStart(8)}${
        fmt(after.nats / before.nats, 2).padStart(9)
      }`
    )
  }
  if (kind === "GET /v1/events opened") continue
  record({
    bench: "post",
    figure: `POST /v1/sandboxes p50, ${kind}`,
    value: after.p50,
    unit: "ms",
    ...(before !== undefined
      ? { baseline: before.p50, baselineName: "BENCH_POST_BEFORE's API", ratio: after.p50 / before.p50 }
      : {}),
    target: "≤ 10 ms",
    met: after.p50 <= 10,
    runs: ROUNDS
  })
}

await Effect.runPromise(Fiber.interrupt(beating))
await stopRoles(roles)
await Promise.all([nats.stop(), pg.close()])
process.exit(0)
