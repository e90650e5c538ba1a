/**
 * Scaling out by process count (issue 16, item 4), on the test cluster the tests start
 * (`@svc/testing/TestCluster`: a 3-node NATS cluster with 3 replicas, users per role, one Postgres):
 *
 *   1. actor throughput with 1 and 2 runtime processes: BENCH_ACTOR_MESSAGES (2000) `SetNetwork`
 *      messages to 16 sandboxes' actors (each a full transition: state saved, an egress KV put
 *      through the outbox), published as the runtime's NATS user; transitions/s until every
 *      message is in the actors' inbox table;
 *   2. webhook deliveries/s with 1 and 2 dispatchers: BENCH_EVENTS (2000) events published to
 *      EVENTS for an org with one webhook (`*`) to a receiver in this process; deliveries/s until
 *      the receiver has every one;
 *   3. sandbox creates/s with 1 and 2 agents: BENCH_CREATES (16) `POST /v1/sandboxes` at once;
 *      creates/s until every one is running (then they are deleted, unmeasured).
 *
 * The other roles run one process each. Each figure is the median of BENCH_RUNS (5) runs on one
 * test cluster per count, and the ratio is 2 processes over 1. Beside each: the CPU each process used
 * during the runs (percent of one core, `/proc/<pid>/stat` of the process and its children) and
 * the machine's busy CPU outside our processes (other tenants, from `/proc/stat`) and the load
 * average, because on a 2-core machine the second process competes for the same cores.
 *
 *   npm run bench scaling      (or: node bench/scaling.ts; BENCH_ONLY=actors|deliveries|creates)
 */
import { makeOrg } from "@svc/testing/Chaos"
import { type RoleName, startTestCluster, type TestCluster } from "@svc/testing/TestCluster"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { startReceiver } from "@svc/testing/WebhookReceiver"
import { Duration, Effect, Layer, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as os from "node:os"
import * as Actors from "../packages/actors/src/Actors.ts"
import { Nats } from "../packages/bus/src/Nats.ts"
import * as Database from "../packages/db/src/Database.ts"
import * as Outbox from "../packages/events/src/Outbox.ts"
import { SandboxActor } from "../packages/sandboxes/src/SandboxActor.ts"
import { fmt, treeCpuByName, treeCpuMs } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"

const RUNS = Number(process.env.BENCH_RUNS ?? 5)
const ACTOR_MESSAGES = Number(process.env.BENCH_ACTOR_MESSAGES ?? 2000)
const EVENTS = Number(process.env.BENCH_EVENTS ?? 2000)
const CREATES = Number(process.env.BENCH_CREATES ?? 16)
const ONLY = process.env.BENCH_ONLY

const log = (line: string) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${line}\n`)

const ENV = {
  SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8",
  SVC_RATE_LIMIT_PER_SECOND: "100000",
  SVC_RATE_LIMIT_BURST: "100000"
}

/** CPU ms of the whole machine so far, every core: busy (ours and the other tenants') and in all. */
const machineMs = () => {
  const [, ...fields] = fs.readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/)
  const [user, nice, system, idle, iowait, irq, softirq, steal] = fields.map(Number)
  const busy = user! + nice! + system! + irq! + softirq! + steal!
  return { busy: busy * 10, total: (busy + idle! + iowait!) * 10 }
}

/** The machine's elapsed CPU time over all cores: the denominator of every share (per core: / cores). */
const TOTAL = "machine, all cores"

const OURS = "ours, all processes"
const OTHERS = "other tenants"

/** CPU ms so far: each role process (with its children), the NATS nodes, Postgres, this process. */
const cpuNow = (testCluster: TestCluster): Record<string, number> => {
  const tree = treeCpuByName(process.pid)
  const out: Record<string, number> = {}
  for (const role of testCluster.roles) out[role.name] = treeCpuMs(role.current().process.pid!)
  out["nats (3 nodes)"] = tree["nats-server"] ?? 0
  out["postgres"] = tree["postgres"] ?? 0
  out["bench (load, receiver)"] = treeCpuMs(process.pid) - Object.values(out).reduce((a, b) => a + b, 0)
  out[OURS] = treeCpuMs(process.pid)
  const machine = machineMs()
  out[OTHERS] = machine.busy - out[OURS]
  out[TOTAL] = machine.total
  return out
}

interface Sample {
  readonly perSecond: number
  readonly wallMs: number
  /** Percent of one core over the run, by process. */
  readonly cpu: Record<string, number>
}

const sql = <A>(databaseUrl: string, f: (sql: SqlClient.SqlClient) => Effect.Effect<A, unknown>) =>
  Effect.gen(function*() {
    return yield* f(yield* SqlClient.SqlClient)
  }).pipe(
    Effect.provide(Database.layerFromUrl(databaseUrl)),
    Effect.orDie
  )

/** Polls `done` every 20 ms until true (10 minutes at most). */
const until = (done: Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 600_000
    while (!(yield* done)) {
      if (Date.now() > deadline) return yield* Effect.die(new Error("bench: the work did not finish in 10 minutes"))
      yield* Effect.sleep(Duration.millis(20))
    }
  })

type Client = (method: string, path: string, body?: unknown) => Promise<{ status: number; json: any }>

const clientOf = (testCluster: TestCluster, token: string): Client => {
  let next = 0
  return async (method, path, body) => {
    const base = testCluster.apiUrls[next++ % testCluster.apiUrls.length]!
    const response = await fetch(base + path, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined ? { "content-type": "application/json" } : {})
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {})
    })
    const text = await response.text()
    return { status: response.status, json: text ? JSON.parse(text) : undefined }
  }
}

const createSandboxes = (client: Client, databaseUrl: string, n: number, name: string) =>
  Effect.gen(function*() {
    const ids = yield* Effect.promise(() =>
      Promise.all(Array.from({ length: n }, async () => {
        const created = await client("POST", "/v1/sandboxes", { name })
        if (created.status !== 201) throw new Error(`create: ${created.status} ${JSON.stringify(created.json)}`)
        return created.json.id as string
      }))
    )
    yield* until(sql(databaseUrl, (sql) =>
      Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM sandboxes WHERE id = ANY(${ids}) AND state = 'running'`,
        ([row]) => row!.n === n
      )))
    return ids
  })

const deleteSandboxes = (client: Client, databaseUrl: string, ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    yield* Effect.promise(() => Promise.all(ids.map((id) => client("DELETE", `/v1/sandboxes/${id}`))))
    yield* until(sql(databaseUrl, (sql) =>
      Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM sandboxes WHERE id = ANY(${ids}) AND state <> 'deleted'`,
        ([row]) => row!.n === 0
      )))
  })

interface Scenario {
  readonly name: string
  readonly unit: string
  readonly role: RoleName
  /** Once per test cluster; returns one run. */
  readonly prepare: (
    testCluster: TestCluster,
    databaseUrl: string,
    client: Client,
    orgId: string
  ) => Effect.Effect<(run: number) => Effect.Effect<Done>, never, Scope.Scope>
}

/** A run's work (what was done) and what to undo afterwards, unmeasured. */
interface Done {
  readonly done: number
  readonly cleanup?: Effect.Effect<void>
}

const asRuntime = (testCluster: TestCluster) =>
  Layer.effect(Nats, Nats.make({ url: testCluster.natsUrl, replicas: 3, security: testCluster.security("runtime") }))

const actors: Scenario = {
  name: "actor transitions/s",
  unit: "transitions/s",
  role: "runtime",
  prepare: (testCluster, databaseUrl, client) =>
    Effect.gen(function*() {
      const ids = yield* createSandboxes(client, databaseUrl, 16, "actors")
      const nats = yield* Layer.build(asRuntime(testCluster)).pipe(Effect.orDie)
      return (run) =>
        Effect.gen(function*() {
          const prefix = `bench-${run}-`
          yield* Effect.forEach(
            Array.from({ length: ACTOR_MESSAGES }, (_, i) => i),
            (i) =>
              Actors.send(SandboxActor, ids[i % ids.length]!, {
                _tag: "SetNetwork",
                network: { allow_out: [], deny_out: [`10.${run}.${i % 250}.0/24`] }
              }, { msgID: `${prefix}${i}` }),
            { concurrency: 64, discard: true }
          ).pipe(Effect.provide(nats), Effect.orDie)
          // Done when the mailboxes are empty (a workqueue: a message leaves once its transition
          // committed and was acked); a cheap read, unlike counting the inbox while it grows.
          const mailboxes = yield* Effect.gen(function*() {
            const bus = yield* Nats
            return bus.name(`ACTOR_${SandboxActor.type.toUpperCase()}`)
          }).pipe(Effect.provide(nats))
          yield* until(
            Effect.gen(function*() {
              const bus = yield* Nats
              const info = yield* Effect.promise(() => bus.jsm.streams.info(mailboxes))
              return info.state.messages === 0
            }).pipe(Effect.provide(nats))
          )
          const applied = yield* sql(databaseUrl, (sql) =>
            Effect.map(
              sql<{ n: number }>`SELECT count(*)::int AS n FROM actor_inbox WHERE msg_id LIKE ${prefix + "%"}`,
              ([row]) => row!.n
            ))
          if (applied !== ACTOR_MESSAGES) {
            return yield* Effect.die(new Error(`bench: ${applied} of ${ACTOR_MESSAGES} messages applied`))
          }
          return { done: ACTOR_MESSAGES }
        })
    })
}

const deliveries: Scenario = {
  name: "webhook deliveries/s",
  unit: "deliveries/s",
  role: "dispatcher",
  prepare: (testCluster, _databaseUrl, client, orgId) =>
    Effect.gen(function*() {
      const receiver = yield* Effect.acquireRelease(
        Effect.promise(() => startReceiver()),
        (r) => Effect.promise(() => r.close())
      )
      const hook = yield* Effect.promise(() => client("POST", "/v1/webhooks", { url: receiver.url, events: ["*"] }))
      if (hook.status !== 201) return yield* Effect.die(new Error(`webhook: ${hook.status}`))
      const nats = yield* Layer.build(asRuntime(testCluster)).pipe(Effect.orDie)
      const encoder = new TextEncoder()
      return (run) =>
        Effect.gen(function*() {
          const before = receiver.received.length
          yield* Effect.forEach(
            Array.from({ length: EVENTS }, (_, i) => i),
            (i) =>
              Effect.gen(function*() {
                const bus = yield* Nats
                const envelope = yield* Outbox.makeEnvelope({
                  event: "sandbox.state_updated",
                  orgId,
                  data: { sandbox_id: `sbx_bench${i}`, state: "running" }
                }, Date.now())
                yield* bus.publishAcked(
                  bus.subject(...Outbox.eventSubject(orgId, "sandbox.state_updated")),
                  encoder.encode(JSON.stringify(envelope)),
                  { msgId: `bench-evt-${run}-${i}` }
                )
              }),
            { concurrency: 64, discard: true }
          ).pipe(Effect.provide(nats), Effect.orDie)
          yield* until(Effect.sync(() => receiver.received.length - before >= EVENTS))
          return { done: EVENTS }
        })
    })
}

const creates: Scenario = {
  name: "sandbox creates/s (to running)",
  unit: "creates/s",
  role: "agent",
  prepare: (_testCluster, databaseUrl, client) =>
    Effect.succeed((run) =>
      Effect.gen(function*() {
        const ids = yield* createSandboxes(client, databaseUrl, CREATES, `creates-${run}`)
        return { done: CREATES, cleanup: deleteSandboxes(client, databaseUrl, ids) }
      })
    )
}

/** One test cluster with `count` processes of the scenario's role (one of each other role); RUNS runs. */
const measure = (scenario: Scenario, count: number) =>
  Effect.scoped(Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.freshDatabase
    const counts = { api: 1, runtime: 1, dispatcher: 1, agent: 1, [scenario.role]: count }
    const testCluster = yield* startTestCluster({ databaseUrl, counts, env: ENV, log })
    const org = yield* makeOrg(databaseUrl)
    const client = clientOf(testCluster, org.api_key)
    const run = yield* scenario.prepare(testCluster, databaseUrl, client, org.org_id)
    const samples: Array<Sample> = []
    for (let r = 0; r < RUNS; r++) {
      const cpuBefore = cpuNow(testCluster)
      const start = performance.now()
      const { cleanup, done } = yield* run(r)
      const wallMs = performance.now() - start
      const cpuAfter = cpuNow(testCluster)
      const cpu: Record<string, number> = {}
      // Shares of one core over the interval between the two readings (as the kernel counted it).
      const perCoreMs = (cpuAfter[TOTAL]! - cpuBefore[TOTAL]!) / os.cpus().length
      for (const [name, ms] of Object.entries(cpuAfter)) {
        if (name !== TOTAL) cpu[name] = (100 * (ms - (cpuBefore[name] ?? 0))) / perCoreMs
      }
      samples.push({ perSecond: (done * 1000) / wallMs, wallMs, cpu })
      log(`${scenario.name}, ${count} ${scenario.role}: run ${r + 1} ${fmt((done * 1000) / wallMs)} ${scenario.unit}`)
      if (cleanup) yield* cleanup
    }
    return samples
  }))

const cpuTable = (samples: ReadonlyArray<Sample>) => {
  const names = Object.keys(samples[0]!.cpu).filter((n) => n !== OURS && n !== OTHERS)
  const of = (n: string) => fmt(median(samples.map((s) => s.cpu[n]!)))
  return `${names.map((n) => `${n} ${of(n)}%`).join(", ")}; ${OURS} ${of(OURS)}%, ${OTHERS} ${of(OTHERS)}% (of ${
    os.cpus().length * 100
  }%)`
}

const main = Effect.gen(function*() {
  const scenarios = [actors, deliveries, creates].filter((s) =>
    ONLY === undefined ||
    (ONLY === "actors" && s === actors) || (ONLY === "deliveries" && s === deliveries) ||
    (ONLY === "creates" && s === creates)
  )
  const lines: Array<string> = []
  for (const scenario of scenarios) {
    const loadBefore = os.loadavg()[0]!
    const one = yield* measure(scenario, 1)
    const two = yield* measure(scenario, 2)
    const loadAfter = os.loadavg()[0]!
    const m1 = median(one.map((s) => s.perSecond))
    const m2 = median(two.map((s) => s.perSecond))
    // No target: on one machine the ratio says what a second process costs, not what it gives.
    record({
      bench: "scaling",
      figure: `${scenario.name}, 2 ${scenario.role} processes`,
      value: m2,
      unit: scenario.unit,
      baseline: m1,
      baselineName: `1 ${scenario.role}`,
      ratio: m2 / m1,
      runs: RUNS
    })
    lines.push(
      `${scenario.name}: 1 ${scenario.role} ${fmt(m1)}, 2 ${scenario.role}s ${fmt(m2)} ${scenario.unit}, ratio ${
        fmt(m2 / m1, 2)
      } (median of ${RUNS}; load average ${fmt(loadBefore, 1)} → ${fmt(loadAfter, 1)})`,
      `  CPU with 1 (% of a core): ${cpuTable(one)}`,
      `  CPU with 2 (% of a core): ${cpuTable(two)}`
    )
  }
  process.stdout.write(`\n${lines.join("\n")}\n`)
})

Effect.runPromise(main).then(
  () => process.exit(),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
