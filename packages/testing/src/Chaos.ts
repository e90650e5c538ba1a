/**
 * A sustained mix of work against a `TestCluster`, faults injected while it runs, and the checks
 * afterwards: what `npm run chaos` prints and `apps/cli/test/Cluster.test.ts` asserts.
 *
 * Clients behave as a client behind a load balancer does: a request that finds no API process
 * (connection refused or reset) goes to the next one, a 503 is retried after a pause; creates
 * carry an `Idempotency-Key`, so a retried create is one sandbox. Every answer's status is
 * counted; a 5xx other than 503 is a wrong answer.
 */
import * as AuthLayer from "@svc/auth/AuthLayer"
import { ensureDevOrg } from "@svc/auth/DevOrg"
import * as Database from "@svc/db/Database"
import { Duration, Effect, Layer, Random } from "effect"
import { SqlClient } from "effect/sql"
import { randomUUID } from "node:crypto"
import type { TestCluster } from "./TestCluster.ts"

export interface Stats {
  /** Answers by status (`refused`: no API process took the connection, retried elsewhere). */
  readonly statuses: Record<string, number>
  /** Requests answered 5xx other than 503, with what was asked. */
  readonly wrong: Array<string>
  created: number
  deleted: number
  execs: number
  keysRevoked: number
  /** Ids of the keys the load created and of those it revoked (each must have its audit entry). */
  readonly keyIds: Array<string>
  readonly revokedKeyIds: Array<string>
  /** Revoked keys still accepted after the revocation settled (wrong answers). */
  revokedAccepted: number
}

export const makeStats = (): Stats => ({
  statuses: {},
  wrong: [],
  created: 0,
  deleted: 0,
  execs: 0,
  keysRevoked: 0,
  keyIds: [],
  revokedKeyIds: [],
  revokedAccepted: 0
})

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export interface Answer {
  readonly status: number
  readonly json: any
}

/** One request through whichever API process answers; retried on refusal and 503 until `deadlineMs`. */
export const makeClient = (apiUrls: ReadonlyArray<string>, stats: Stats) => {
  let next = 0
  return async (
    method: string,
    path: string,
    options: { token: string; body?: unknown; headers?: Record<string, string>; deadlineMs?: number }
  ): Promise<Answer> => {
    const deadline = Date.now() + (options.deadlineMs ?? 60_000)
    for (;;) {
      const base = apiUrls[next++ % apiUrls.length]!
      try {
        const response = await fetch(base + path, {
          method,
          headers: {
            authorization: `Bearer ${options.token}`,
            ...(options.body !== undefined ? { "content-type": "application/json" } : {}),
            ...options.headers
          },
          ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
          signal: AbortSignal.timeout(30_000)
        })
        const text = await response.text()
        stats.statuses[response.status] = (stats.statuses[response.status] ?? 0) + 1
        if (response.status >= 500 && response.status !== 503) {
          stats.wrong.push(`${method} ${path} → ${response.status} ${text.slice(0, 300)}`)
        }
        if (response.status === 503 && Date.now() < deadline) {
          await sleep(250)
          continue
        }
        let json: any = undefined
        try {
          json = text.length > 0 ? JSON.parse(text) : undefined
        } catch {}
        return { status: response.status, json }
      } catch (cause) {
        stats.statuses["refused"] = (stats.statuses["refused"] ?? 0) + 1
        if (Date.now() >= deadline) throw cause
        await sleep(100)
      }
    }
  }
}

export type Client = ReturnType<typeof makeClient>

/** A dev org on the test cluster's database and its key (the operator's `svc org`). */
export const makeOrg = (databaseUrl: string) =>
  ensureDevOrg(null).pipe(
    Effect.provide(AuthLayer.operatorLayer.pipe(Layer.provideMerge(Database.layerFromUrl(databaseUrl)))),
    Effect.orDie
  )

/**
 * The mix until `untilMs`: `workers` loops of create → running → exec → delete, and one loop of
 * key create → use → revoke → refused.
 */
export const runLoad = async (options: {
  readonly client: Client
  readonly token: string
  readonly untilMs: number
  readonly workers: number
  readonly stats: Stats
  readonly log?: (line: string) => void
}) => {
  const { client, stats, token } = options
  const sandboxLoop = async (worker: number) => {
    while (Date.now() < options.untilMs) {
      const created = await client("POST", "/v1/sandboxes", {
        token,
        body: { name: `chaos-${worker}` },
        headers: { "idempotency-key": randomUUID() }
      })
      if (created.status !== 201) {
        options.log?.(`create → ${created.status} ${JSON.stringify(created.json)}`)
        await sleep(500)
        continue
      }
      stats.created++
      const id = created.json.id as string
      // Running, or an end state (error: its host was lost with it).
      for (let i = 0; i < 240; i++) {
        const got = await client("GET", `/v1/sandboxes/${id}`, { token })
        if (got.json?.state === "running" || got.json?.state === "error") break
        await sleep(250)
      }
      for (let i = 0; i < 2; i++) {
        const exec = await client("POST", `/v1/sandboxes/${id}/exec`, { token, body: { cmd: ["echo", "chaos"] } })
        if (exec.status === 200) stats.execs++
      }
      const deleted = await client("DELETE", `/v1/sandboxes/${id}`, { token })
      if (deleted.status === 202) stats.deleted++
    }
  }
  const keyLoop = async () => {
    while (Date.now() < options.untilMs) {
      const key = await client("POST", "/v1/auth/api-keys", { token, body: { name: "chaos" } })
      if (key.status !== 201) {
        await sleep(1_000)
        continue
      }
      const secret = key.json.token as string
      stats.keyIds.push(key.json.id)
      await client("GET", "/v1/sandboxes", { token: secret })
      const revoked = await client("DELETE", `/v1/auth/api-keys/${key.json.id}`, { token })
      if (revoked.status !== 200) continue
      stats.keysRevoked++
      stats.revokedKeyIds.push(key.json.id)
      // Refused by every API process once the revocation settled (at most the key cache's TTL).
      await sleep(1_000)
      for (let i = 0; i < options.workers + 2; i++) {
        const used = await client("GET", "/v1/sandboxes", { token: secret })
        if (used.status === 200) {
          await sleep(31_000)
          const again = await client("GET", "/v1/sandboxes", { token: secret })
          if (again.status === 200) stats.revokedAccepted++
          break
        }
      }
      await sleep(2_000)
    }
  }
  await Promise.all([...Array.from({ length: options.workers }, (_, i) => sandboxLoop(i)), keyLoop()])
}

export interface Faults {
  readonly killed: Array<string>
  readonly natsStops: Array<string>
  /** How long each restart took, kill to ready (ms), by role. */
  readonly restartMs: Record<string, Array<number>>
}

/**
 * Until `untilMs`: each role has a loop of its own that kills -9 one of its processes (at random)
 * every `everyMs` or so (±50%) and starts it again, so kills of different roles overlap while
 * one role's processes die one at a time (another of that role is up meanwhile); each role dies
 * at least once, the first kills spread over the first `everyMs`. And at `natsDownAtMs` one NATS
 * node stopped (SIGKILL) for `natsDownForMs`.
 */
export const runFaults = (options: {
  readonly testCluster: TestCluster
  readonly startMs: number
  readonly untilMs: number
  readonly everyMs: number
  readonly natsDownAtMs: number
  readonly natsDownForMs: number
  readonly log?: (line: string) => void
}) =>
  Effect.gen(function*() {
    const faults: Faults = { killed: [], natsStops: [], restartMs: {} }
    const nats = Effect.gen(function*() {
      yield* Effect.sleep(Duration.millis(Math.max(0, options.startMs + options.natsDownAtMs - Date.now())))
      const node = yield* Random.nextIntBetween(0, 2, { halfOpen: false })
      yield* Effect.promise(() => options.testCluster.cluster.kill(node))
      faults.natsStops.push(`n${node + 1}`)
      options.log?.(`NATS node n${node + 1} stopped`)
      yield* Effect.sleep(Duration.millis(options.natsDownForMs))
      yield* Effect.promise(() => options.testCluster.cluster.start(node))
      options.log?.(`NATS node n${node + 1} back`)
    })
    const roles = [...new Set(options.testCluster.roles.map((r) => r.role))]
    const killLoop = (role: string, index: number) =>
      Effect.gen(function*() {
        const processes = options.testCluster.roles.filter((r) => r.role === role)
        yield* Effect.sleep(Duration.millis(((index + 1) * options.everyMs) / (roles.length + 1)))
        // At least once, even past `untilMs`; then while time remains.
        do {
          const victim = processes[yield* Random.nextIntBetween(0, processes.length - 1, { halfOpen: false })]!
          faults.killed.push(victim.name)
          yield* victim.crashAndRestart
          ;(faults.restartMs[role] ??= []).push(victim.restartMs().at(-1)!)
          const pause = options.everyMs * (0.5 + (yield* Random.next))
          if (Date.now() + pause >= options.untilMs) break
          yield* Effect.sleep(Duration.millis(pause))
        } while (Date.now() < options.untilMs)
      })
    yield* Effect.all([nats, ...roles.map(killLoop)], { concurrency: "unbounded", discard: true })
    return faults
  })

/** What `check` needs of a webhook receiver: the requests it got. */
export interface Receiver {
  readonly received: ReadonlyArray<
    { readonly headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>> }
  >
}

export interface Outcome {
  /** Events the platform committed for the org (its outbox), each one webhook delivery expected. */
  readonly sent: number
  /** Of those, delivered to the receiver at least once. */
  readonly delivered: number
  readonly lost: ReadonlyArray<string>
  /** Receipts of a delivery id already received. */
  readonly duplicated: number
  /** Sandboxes left in pending, starting, stopping or deleting. */
  readonly stuck: ReadonlyArray<string>
  /**
   * From the sandbox actors' own transition log (`actor_inbox`, each row the version its message
   * stored): sandboxes whose stored versions were not each produced by exactly one message
   * (a version with no message, or with two, is a transition applied outside the dedupe or twice);
   * and, from the events, the same state committed twice in a row or `created` twice.
   */
  readonly repeatedTransitions: ReadonlyArray<string>
  /** Sandboxes whose transitions the check read from the log (all of the org's). */
  readonly transitionsChecked: { readonly sandboxes: number; readonly versions: number }
  /** Audited actions of the load (each key created, each key revoked) with no audit entry, by `<action> <key id>`. */
  readonly auditMissing: ReadonlyArray<string>
  /** Audit entries the check looked for. */
  readonly auditChecked: number
}

/**
 * Waits (up to `settleMs`) for every sandbox to leave its transitional state and every committed
 * event to reach the receiver, then counts.
 */
export const check = (options: {
  readonly databaseUrl: string
  readonly orgId: string
  readonly webhookId: string
  readonly receiver: Receiver
  readonly stats: Stats
  readonly settleMs: number
}) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const deadline = Date.now() + options.settleMs
    const pattern = `evt.${options.orgId}.%`
    const read = Effect.gen(function*() {
      const events = yield* sql<{ id: string; payload: string }>`
        SELECT id, payload::text AS payload FROM outbox WHERE subject LIKE ${pattern} ORDER BY id`
      const deliveries = yield* sql<{ id: string; event_msg_id: string }>`
        SELECT id, event_msg_id FROM webhook_deliveries WHERE webhook_id = ${options.webhookId}`
      const stuck = yield* sql<{ id: string; state: string }>`
        SELECT id, state FROM sandboxes WHERE org_id = ${options.orgId}
          AND state IN ('pending', 'starting', 'stopping', 'deleting')`
      const received = new Map<string, number>()
      for (const r of options.receiver.received) {
        const id = String(r.headers["x-svc-delivery-id"] ?? "")
        received.set(id, (received.get(id) ?? 0) + 1)
      }
      const deliveryOf = new Map(deliveries.map((d) => [d.event_msg_id, d.id]))
      const lost = events.filter((e) => {
        const delivery = deliveryOf.get(e.id)
        return delivery === undefined || !received.has(delivery)
      }).map((e) => e.id)
      return { events, lost, received, stuck }
    }).pipe(Effect.orDie)
    let state = yield* read
    while ((state.lost.length > 0 || state.stuck.length > 0) && Date.now() < deadline) {
      yield* Effect.sleep(Duration.seconds(1))
      state = yield* read
    }
    // A transition applied twice commits the same state twice in a row for one sandbox (or a
    // second `sandbox.created`). The same state again after another one is the sandbox really
    // going there again (a host killed under it: running → error → running), not a repeat.
    const transitions = new Map<string, number>()
    const lastState = new Map<string, string>()
    for (const e of state.events) {
      const payload = JSON.parse(e.payload)
      const envelope = typeof payload === "string" ? JSON.parse(payload) : payload
      const data = envelope.data ?? envelope.payload?.data ?? {}
      if (envelope.event === "sandbox.created") {
        const key = `sandbox.created ${data.sandbox_id}`
        transitions.set(key, (transitions.get(key) ?? 0) + 1)
      } else if (envelope.event === "sandbox.state_updated") {
        if (lastState.get(data.sandbox_id) === data.state) {
          const key = `sandbox.state_updated ${data.sandbox_id} ${data.state} in a row`
          transitions.set(key, (transitions.get(key) ?? 1) + 1)
        }
        lastState.set(data.sandbox_id, data.state)
      }
    }
    // Every version each sandbox stored, 1 up to its current one, produced by exactly one message.
    const log = yield* sql<{ id: string; version: number; logged: number; distinct: number; last: number | null }>`
      SELECT s.id, s.version::int AS version, count(i.version)::int AS logged,
        count(DISTINCT i.version)::int AS distinct, max(i.version)::int AS last
      FROM sandboxes s
      LEFT JOIN actor_inbox i ON i.type = 'sandbox' AND i.entity_id = s.id AND i.version IS NOT NULL
      WHERE s.org_id = ${options.orgId}
      GROUP BY s.id, s.version`.pipe(Effect.orDie)
    const notOnce = log.filter((r) => r.logged !== r.version || r.distinct !== r.version || r.last !== r.version)
      .map((r) =>
        `${r.id}: versions 1..${r.version} stored, the log has ${r.logged} messages for ${r.distinct} versions (last ${r.last})`
      )
    const audited = yield* sql<{ action: string; target_id: string }>`
      SELECT action, target_id FROM audit_log
      WHERE org_id = ${options.orgId} AND action IN ('apikey.created', 'apikey.revoked')`.pipe(Effect.orDie)
    const entries = new Set(audited.map((a) => `${a.action} ${a.target_id}`))
    const expectedAudit = [
      ...options.stats.keyIds.map((id) => `apikey.created ${id}`),
      ...options.stats.revokedKeyIds.map((id) => `apikey.revoked ${id}`)
    ]
    let duplicated = 0
    for (const n of state.received.values()) duplicated += n - 1
    return {
      sent: state.events.length,
      delivered: state.events.length - state.lost.length,
      lost: state.lost,
      duplicated,
      stuck: state.stuck.map((s) => `${s.id} ${s.state}`),
      repeatedTransitions: [...notOnce, ...[...transitions].filter(([, n]) => n > 1).map(([k, n]) => `${k} ×${n}`)],
      transitionsChecked: { sandboxes: log.length, versions: log.reduce((n, r) => n + r.version, 0) },
      auditMissing: expectedAudit.filter((e) => !entries.has(e)),
      auditChecked: expectedAudit.length
    } satisfies Outcome
  }).pipe(Effect.provide(Database.layerFromUrl(options.databaseUrl)))
