/**
 * The runtime's sandbox supervisor with 10,000 sandboxes in the table (BENCH_SANDBOXES): the time
 * of one sweep (its three statements: hosts holding sandboxes, transitions waiting too long,
 * lifecycle settings due), in steady state (nothing due: every host live, every timeout ahead),
 * against the same sweep with its indexes dropped (a pass over the table per statement) in the
 * same run. A sweep that finds nothing sends nothing, so its time is its database time. Median of
 * BENCH_SWEEPS (30) sweeps each; the plans (EXPLAIN ANALYZE) are printed.
 *   npm run bench supervisor     (or: node bench/supervisor.ts)
 * Target: one sweep's database time < 50 ms.
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Duration, Effect, Layer, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import { ensureBucket } from "../packages/bus/src/Topology.ts"
import { makeHostId } from "../packages/domain/src/Ids.ts"
import { type HostRecord, HOSTS_BUCKET_SPEC } from "../packages/host-protocol/src/Protocol.ts"
import { Hosts } from "../packages/hosts/src/Hosts.ts"
import { SandboxSupervisor } from "../packages/sandboxes/src/Sandboxes/Supervisor.ts"
import { fmt } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"

const N = Number(process.env.BENCH_SANDBOXES ?? 10_000)
const SWEEPS = Number(process.env.BENCH_SWEEPS ?? 30)
const HOSTS: ReadonlyArray<string> = Array.from({ length: 4 }, () => makeHostId())
const TARGET_MS = 50

/** Live host records, their heartbeat kept fresh for the run. */
const liveHosts = Effect.gen(function*() {
  const kv = yield* ensureBucket(HOSTS_BUCKET_SPEC)
  const put = Effect.forEach(HOSTS, (hostId) => {
    const host: HostRecord = {
      hostId,
      region: "local",
      datacenter: "bench-1",
      version: "bench",
      capacity: { cpu: 64, ramMb: 65_536, diskGb: 500 },
      endpoint: "http://127.0.0.1:9",
      token: "bench",
      heartbeatAt: Date.now(),
      startedAt: Date.now()
    }
    return Effect.promise(() => kv.put(hostId, JSON.stringify(host)))
  }, { discard: true })
  yield* put
  yield* Effect.forkScoped(Effect.repeat(put, Schedule.spaced(Duration.seconds(1))))
})

/**
 * N sandboxes as a platform holds them: 70 % running on the hosts (a third with timeout_s, a
 * third with idle_timeout_s, due in an hour or more), 20 % stopped (half with auto_delete_s, due
 * in a day), 5 % deleted, 3 % in error, 2 % starting (since a moment).
 */
const fill = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`INSERT INTO orgs (id, name) VALUES ('org_bench', 'bench') ON CONFLICT DO NOTHING`
  yield* sql`
    INSERT INTO sandboxes (id, org_id, name, template_id, template_name, host_id, state, type, region, cpu, ram_mb,
      disk_gb, created_at, started_at, stopped_at, state_since, version, timeout_s, idle_timeout_s, auto_delete_s,
      timeout_from, last_activity_at, due_at)
    SELECT 'sbx_bench_' || i, 'org_bench', 'bench ' || i, 'tpl_base', 'base',
      (${HOSTS}::text[])[1 + i % ${HOSTS.length}], s.state, 'persistent', 'local', 1, 512, 1,
      now() - interval '2 hours', now() - interval '1 hour',
      CASE WHEN s.state = 'stopped' THEN now() - interval '10 minutes' END,
      now() - interval '1 second', 1,
      CASE WHEN s.state = 'running' AND i % 3 = 0 THEN 7200 + i END,
      CASE WHEN s.state = 'running' AND i % 3 = 1 THEN 3600 + i END,
      CASE WHEN s.state = 'stopped' AND i % 2 = 0 THEN 86400 END,
      CASE WHEN s.state = 'running' THEN now() - interval '1 hour' END,
      CASE WHEN s.state = 'running' THEN now() - interval '1 minute' END,
      CASE
        WHEN s.state = 'running' AND i % 3 = 0 THEN now() + make_interval(secs => 3600 + i)
        WHEN s.state = 'running' AND i % 3 = 1 THEN now() + make_interval(secs => 3540 + i)
        WHEN s.state = 'stopped' AND i % 2 = 0 THEN now() + interval '1 day'
      END
    FROM generate_series(1, ${N}) AS i,
      LATERAL (SELECT CASE
        WHEN i % 100 < 70 THEN 'running' WHEN i % 100 < 90 THEN 'stopped' WHEN i % 100 < 95 THEN 'deleted'
        WHEN i % 100 < 98 THEN 'error' ELSE 'starting' END AS state) s`
  yield* sql`ANALYZE sandboxes`
})

const INDEXES = ["sandboxes_due", "sandboxes_host", "sandboxes_waiting"] as const

/** Each statement of a sweep as the supervisor runs it, explained. */
const explain = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const now = new Date()
  const plans = {
    hosts: sql`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON)
      WITH RECURSIVE h(id) AS (
        (SELECT host_id FROM sandboxes WHERE host_id IS NOT NULL AND state <> 'deleted' ORDER BY host_id LIMIT 1)
        UNION ALL
        SELECT (SELECT host_id FROM sandboxes WHERE host_id > h.id AND state <> 'deleted' ORDER BY host_id LIMIT 1)
        FROM h WHERE h.id IS NOT NULL
      )
      SELECT id FROM h WHERE id IS NOT NULL`,
    timeouts: sql`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON)
      SELECT id, state, state_since FROM sandboxes
      WHERE state IN ('pending', 'starting', 'stopping', 'deleting') AND state_since < ${new Date(
      now.getTime() - 120_000
    )} LIMIT 500`,
    lapses: sql`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON)
      SELECT id, state, on_timeout, timeout_s, timeout_from, idle_timeout_s, last_activity_at, busy,
        auto_delete_s, stopped_at
      FROM sandboxes WHERE due_at <= ${now} ORDER BY due_at LIMIT 500`
  }
  const out: Record<string, string> = {}
  let ms = 0
  for (const [name, statement] of Object.entries(plans)) {
    const rows = (yield* statement) as ReadonlyArray<{ "QUERY PLAN": string }>
    const lines = rows.map((r) => r["QUERY PLAN"])
    out[name] = lines.join("\n    ")
    // The server's own time for it: planning and execution.
    for (const line of lines) {
      const time = /^(?:Planning|Execution) Time: ([\d.]+) ms$/.exec(line.trim())
      if (time !== null) ms += Number(time[1])
    }
  }
  return { plans: out, ms }
})

/** The database's time of one sweep (its statements' planning and execution), median of SWEEPS. */
const databaseTime = Effect.gen(function*() {
  const times: Array<number> = []
  let last: Record<string, string> = {}
  for (let i = 0; i < SWEEPS; i++) {
    const { ms, plans } = yield* explain
    times.push(ms)
    last = plans
  }
  return { ms: median(times), plans: last }
})

const sweeps = Effect.gen(function*() {
  const supervisor = yield* SandboxSupervisor
  const times: Array<number> = []
  for (let i = 0; i < SWEEPS + 3; i++) {
    const start = performance.now()
    const sent = yield* supervisor.sweep
    const ms = performance.now() - start
    if (sent !== 0) return yield* Effect.die(new Error(`a steady-state sweep sent ${sent} messages`))
    if (i >= 3) times.push(ms) // the first ones warm up (JIT, pool connections)
  }
  return median(times)
})

const [natsServer, pg] = await Promise.all([startNats(), startPostgres()])
process.env.SVC_TEST_NATS_URL = natsServer.url
process.env.SVC_TEST_DATABASE_URL = pg.url

await Effect.runPromise(
  Effect.gen(function*() {
    yield* liveHosts
    yield* fill
    // Its own loop sweeps only once an hour: the sweeps timed are this benchmark's.
    const supervisor = SandboxSupervisor.layer({ intervalMs: 3_600_000 }).pipe(Layer.provideMerge(Hosts.layer))
    const context = yield* Layer.build(supervisor)
    const hosts = Context.get(context, Hosts)
    while (!(yield* hosts.synced) || (yield* hosts.live).length < HOSTS.length) yield* Effect.sleep("50 millis")

    const indexed = yield* Effect.provide(sweeps, context)
    const { ms: indexedDb, plans } = yield* databaseTime
    const sql = yield* SqlClient.SqlClient
    for (const index of INDEXES) yield* sql`DROP INDEX ${sql(index)}`
    yield* sql`ANALYZE sandboxes`
    const scanned = yield* Effect.provide(sweeps, context)
    const { ms: scannedDb, plans: scanPlans } = yield* databaseTime

    console.log(`Supervisor sweep, ${fmt(N)} sandboxes in the table, median of ${SWEEPS} sweeps`)
    console.log(`  database time: ${fmt(indexedDb, 2)} ms   without its indexes (scans): ${fmt(scannedDb, 2)} ms`)
    console.log(`  wall time (client, pool, loaded machine): ${fmt(indexed, 2)} ms   without: ${fmt(scanned, 2)} ms`)
    for (const [name, plan] of Object.entries(plans)) console.log(`  EXPLAIN ${name}:\n    ${plan}`)
    for (const [name, plan] of Object.entries(scanPlans)) console.log(`  without indexes, ${name}:\n    ${plan}`)
    record({
      bench: "supervisor",
      figure: `one sweep's database time, ${fmt(N)} sandboxes`,
      value: indexedDb,
      unit: "ms",
      baseline: scannedDb,
      baselineName: "same statements, no indexes",
      ratio: indexedDb / scannedDb,
      target: `< ${TARGET_MS} ms`,
      met: indexedDb < TARGET_MS,
      runs: SWEEPS
    })
    record({
      bench: "supervisor",
      figure: `one sweep's wall time, ${fmt(N)} sandboxes`,
      value: indexed,
      unit: "ms",
      baseline: scanned,
      baselineName: "same sweep, no indexes",
      ratio: indexed / scanned,
      runs: SWEEPS
    })
  }).pipe(
    Effect.provide(Layer.mergeAll(TestNats.layer, TestDatabase.layer)),
    Effect.scoped
  )
)
await Promise.all([natsServer.stop(), pg.close()])
