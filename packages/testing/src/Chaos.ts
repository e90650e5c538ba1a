/**
 * A sustained mix of work against a `Topology`, faults injected while it runs, and the checks
 * afterwards: what `npm run chaos` prints and `apps/cli/test/Topology.test.ts` asserts.
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
import type { Topology } from "./Topology.ts"

export interface Stats {
  /** Answers by status (`refused`: no API process took the connection, retried elsewhere). */
  readonly statuses: Record<string, number>
  /** Requests answered 5xx other than 503, with what was asked. */
  readonly wrong: Array<string>
  created: number
  deleted: number
  execs: number
  keysRevoked: number
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

/** A dev org on the topology's database and its key (the operator's `svc org`). */
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
      await client("GET", "/v1/sandboxes", { token: secret })
      const revoked = await client("DELETE", `/v1/auth/api-keys/${key.json.id}`, { token })
      if (revoked.status !== 200) continue
      stats.keysRevoked++
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
}

/**
 * Until `untilMs`: every `everyMs`, one random role process killed -9 and started again (the
 * first pass takes each role in turn, so every role dies at least once); and at `natsDownAtMs`
 * one NATS node stopped (SIGKILL) for `natsDownForMs`.
 */
export const runFaults = (options: {
  readonly topology: Topology
  readonly startMs: number
  readonly untilMs: number
  readonly everyMs: number
  readonly natsDownAtMs: number
  readonly natsDownForMs: number
  readonly log?: (line: string) => void
}) =>
  Effect.gen(function*() {
    const faults: Faults = { killed: [], natsStops: [] }
    const nats = Effect.gen(function*() {
      yield* Effect.sleep(Duration.millis(Math.max(0, options.startMs + options.natsDownAtMs - Date.now())))
      const node = yield* Random.nextIntBetween(0, 2, { halfOpen: false })
      yield* Effect.promise(() => options.topology.cluster.kill(node))
      faults.natsStops.push(`n${node + 1}`)
      options.log?.(`NATS node n${node + 1} stopped`)
      yield* Effect.sleep(Duration.millis(options.natsDownForMs))
      yield* Effect.promise(() => options.topology.cluster.start(node))
      options.log?.(`NATS node n${node + 1} back`)
    })
    const kills = Effect.gen(function*() {
      const order = ["agent", "runtime", "dispatcher", "api"] as const
      let round = 0
      // Every role once, even past `untilMs` (a restart takes seconds); then random ones while time remains.
      while (round < order.length || Date.now() + options.everyMs < options.untilMs) {
        yield* Effect.sleep(Duration.millis(options.everyMs))
        const candidates = round < order.length
          ? options.topology.roles.filter((r) => r.role === order[round])
          : options.topology.roles
        const victim = candidates[yield* Random.nextIntBetween(0, candidates.length - 1, { halfOpen: false })]!
        round++
        faults.killed.push(victim.name)
        yield* victim.crashAndRestart
      }
    })
    yield* Effect.all([nats, kills], { concurrency: "unbounded", discard: true })
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
  /** The same state committed twice in a row for a sandbox, or `created` twice: a transition applied twice. */
  readonly repeatedTransitions: ReadonlyArray<string>
  /** Key creations and revocations with no audit entry. */
  readonly auditMissing: number
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
    const audit = yield* sql<{ action: string; n: number }>`
      SELECT action, count(*)::int AS n FROM audit_log WHERE org_id = ${options.orgId} GROUP BY action`.pipe(
      Effect.orElseSucceed(() => [])
    )
    const revokedAudited = audit.filter((a) => a.action.includes("revoke")).reduce((n, a) => n + a.n, 0)
    let duplicated = 0
    for (const n of state.received.values()) duplicated += n - 1
    return {
      sent: state.events.length,
      delivered: state.events.length - state.lost.length,
      lost: state.lost,
      duplicated,
      stuck: state.stuck.map((s) => `${s.id} ${s.state}`),
      repeatedTransitions: [...transitions].filter(([, n]) => n > 1).map(([k, n]) => `${k} ×${n}`),
      auditMissing: Math.max(0, options.stats.keysRevoked - revokedAudited)
    } satisfies Outcome
  }).pipe(Effect.provide(Database.layerFromUrl(options.databaseUrl)))
