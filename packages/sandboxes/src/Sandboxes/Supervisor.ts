/**
 * What keeps sandboxes from hanging, in the runtime role: every `intervalMs` it
 * - sends `HostDown` to each sandbox (not yet `error` or `deleted`) whose host's record is
 *   older than `HOST_DOWN_AFTER_MS` or gone;
 * - sends `Timeout` to each sandbox waiting in `pending`, `starting`, `stopping` or `deleting`
 *   for longer than the transition timeout (`SVC_SANDBOX_TRANSITION_TIMEOUT`, default 2m);
 * - sends what each sandbox's lifecycle settings call for once due (`Lifecycle.ts`, through the
 *   row's `due_at` and its index): `Expire` past `timeout_s`, `Idle` past `idle_timeout_s`,
 *   `AutoDelete` for a stopped one past `auto_delete_s` (with its descendants, deleted with it,
 *   as `on_timeout: delete` also does).
 *
 * Each message carries what was seen (the host's last heartbeat, the state and since when),
 * so a sandbox that moved on in the meantime ignores it, and a message id made of the same,
 * so several runtime processes sending it at once are one message.
 */
import * as Actors from "@svc/actors/Actors"
import { Nats } from "@svc/bus/Nats"
import * as Rows from "@svc/db/Rows"
import { SandboxState } from "@svc/domain/Sandbox"
import { HOST_DOWN_AFTER_MS } from "@svc/host-protocol/Protocol"
import { Hosts, isLive } from "@svc/hosts/Hosts"
import { Clock, Context, Duration, Effect, Layer, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { SupervisorInterval, TransitionTimeout } from "../Config.ts"
import { SandboxActor } from "../SandboxActor.ts"
import * as Lifecycle from "./Lifecycle.ts"
import { SandboxActorState, type SandboxMessage } from "./Model.ts"

export interface SupervisorOptions {
  /** Time between two sweeps (default: `SVC_SUPERVISOR_INTERVAL`, 1 s). */
  readonly intervalMs?: number
  /** How long a sandbox may wait in a transitional state (default: `SVC_SANDBOX_TRANSITION_TIMEOUT`, 2 min). */
  readonly transitionTimeoutMs?: number
  readonly hostDownAfterMs?: number
  /** Rows handled per sweep and kind (default 500). */
  readonly batch?: number
}

const onDownHosts = Rows.decoder(
  "SandboxSupervisor.hostsDown",
  Schema.Struct({ id: Schema.String, host_id: Schema.String })
)
const hostIds = Rows.decoder("SandboxSupervisor.hosts", Schema.Struct({ id: Schema.String }))
const waiting = Rows.decoder(
  "SandboxSupervisor.timeouts",
  Schema.Struct({ id: Schema.String, state: SandboxState, state_since: Rows.Timestamptz })
)
const field = SandboxActorState.fields
const dueRows = Rows.decoder(
  "SandboxSupervisor.lapses",
  Schema.Struct({
    id: Schema.String,
    state: field.state,
    on_timeout: field.onTimeout,
    timeout_s: field.timeoutS,
    timeout_from: Schema.NullOr(Rows.Timestamptz),
    idle_timeout_s: field.idleTimeoutS,
    last_activity_at: Schema.NullOr(Rows.Timestamptz),
    busy: field.busy,
    auto_delete_s: field.autoDeleteS,
    stopped_at: Schema.NullOr(Rows.Timestamptz)
  })
)
const treeRows = Rows.decoder(
  "SandboxSupervisor.descendants",
  Schema.Struct({ id: Schema.String, host_id: Schema.NullOr(Schema.String) })
)
const ms = (d: Date | null) => (d === null ? null : d.getTime())

export class SandboxSupervisor extends Context.Service<SandboxSupervisor, {
  /** One sweep now (what the loop runs); the number of messages sent. */
  readonly sweep: Effect.Effect<number>
}>()("@svc/sandboxes/Sandboxes/Supervisor") {
  static readonly make = Effect.fn("SandboxSupervisor.make")(function*(options: SupervisorOptions = {}) {
    const sql = yield* SqlClient.SqlClient
    const hosts = yield* Hosts
    const nats = yield* Nats
    const intervalMs = options.intervalMs ?? Duration.toMillis(yield* SupervisorInterval)
    const timeoutMs = options.transitionTimeoutMs ?? Duration.toMillis(yield* TransitionTimeout)
    const downAfterMs = options.hostDownAfterMs ?? HOST_DOWN_AFTER_MS
    const batch = options.batch ?? 500

    const send = (id: string, message: SandboxMessage, msgID: string) =>
      Actors.send(SandboxActor, id, message, { msgID }).pipe(
        Effect.as(1),
        Effect.catchCause((cause) =>
          Effect.as(Effect.logWarning("supervisor: send failed", { id, cause: String(cause) }), 0)
        )
      )

    const hostsDown = Effect.gen(function*() {
      // A mirror that has not read the bucket yet would call every host down.
      if (!(yield* hosts.synced)) return 0
      const now = yield* Clock.currentTimeMillis
      const all = yield* hosts.all
      const live = all.filter((h) => isLive(h, now, downAfterMs)).map((h) => h.hostId)
      // The hosts that hold sandboxes, one index probe per host (a loose scan of `sandboxes_host`,
      // never a pass over every row); then the sandboxes of those that are down, if any.
      const holding = yield* hostIds(sql`
        WITH RECURSIVE h(id) AS (
          (SELECT host_id FROM sandboxes WHERE host_id IS NOT NULL AND state <> 'deleted' ORDER BY host_id LIMIT 1)
          UNION ALL
          SELECT (SELECT host_id FROM sandboxes WHERE host_id > h.id AND state <> 'deleted' ORDER BY host_id LIMIT 1)
          FROM h WHERE h.id IS NOT NULL
        )
        SELECT id FROM h WHERE id IS NOT NULL`)
      const down = holding.map((h) => h.id).filter((id) => !live.includes(id))
      if (down.length === 0) return 0
      const rows = yield* onDownHosts(sql`
        SELECT id, host_id FROM sandboxes
        WHERE host_id = ANY(${down}::text[]) AND state NOT IN ('deleted', 'error')
        LIMIT ${batch}`)
      if (rows.length === 0) return 0
      // Down is final for these sandboxes: confirmed by a fresh read of the bucket, not by the
      // mirror alone, whose watch may lag behind the heartbeats in a starved process.
      yield* hosts.refresh
      const checkedAt = yield* Clock.currentTimeMillis
      const fresh = yield* hosts.all
      const stillDown = new Set(
        down.filter((id) => !fresh.some((h) => h.hostId === id && isLive(h, checkedAt, downAfterMs)))
      )
      let sent = 0
      for (const row of rows) {
        if (!stillDown.has(row.host_id)) continue
        const lastSeenAt = fresh.find((h) => h.hostId === row.host_id)?.heartbeatAt ?? null
        sent += yield* send(
          row.id,
          { _tag: "HostDown", hostId: row.host_id, lastSeenAt },
          `hostdown:${row.id}:${row.host_id}:${lastSeenAt ?? "gone"}`
        )
      }
      return sent
    })

    const timeouts = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const rows = yield* waiting(sql`
        SELECT id, state, state_since FROM sandboxes
        WHERE state IN ('pending', 'starting', 'stopping', 'deleting') AND state_since < ${new Date(now - timeoutMs)}
        LIMIT ${batch}`)
      let sent = 0
      for (const row of rows) {
        const since = row.state_since.getTime()
        sent += yield* send(
          row.id,
          { _tag: "Timeout", state: row.state, since, afterMs: timeoutMs },
          `timeout:${row.id}:${row.state}:${since}`
        )
      }
      return sent
    })

    /** Its descendants, deleted with it (as DELETE does), each with whether its host is live. */
    const childrenOf = (id: string) =>
      Effect.gen(function*() {
        const rows = yield* treeRows(sql`
          WITH RECURSIVE tree AS (
            SELECT id FROM sandboxes WHERE parent_id = ${id}
            UNION SELECT c.id FROM sandboxes c JOIN tree t ON c.parent_id = t.id
          )
          SELECT s.id, s.host_id FROM tree JOIN sandboxes s ON s.id = tree.id
          WHERE s.state NOT IN ('deleting', 'deleted')`)
        return yield* Effect.forEach(rows, (r) =>
          Effect.map(
            r.host_id === null ? Effect.succeed(false) : hosts.isLive(r.host_id),
            (hostLive) => ({ id: r.id, hostLive })
          ))
      })

    /** The rows whose `due_at` passed (the `sandboxes_due` index), each told what is due. */
    const lapses = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const rows = yield* dueRows(sql`
        SELECT id, state, on_timeout, timeout_s, timeout_from, idle_timeout_s, last_activity_at, busy,
          auto_delete_s, stopped_at
        FROM sandboxes WHERE due_at <= ${new Date(now)} ORDER BY due_at LIMIT ${batch}`)
      let sent = 0
      for (const row of rows) {
        const d = Lifecycle.due({
          state: row.state,
          timeoutS: row.timeout_s,
          timeoutFrom: ms(row.timeout_from),
          idleTimeoutS: row.idle_timeout_s,
          lastActivityAt: ms(row.last_activity_at),
          busy: row.busy,
          autoDeleteS: row.auto_delete_s,
          stoppedAt: ms(row.stopped_at)
        }, now)
        if (d === null) continue
        const deletes = d.kind === "auto_delete" || row.on_timeout === "delete"
        const children = deletes ? yield* childrenOf(row.id) : []
        const msgID = `${d.kind}:${row.id}:${d.seen}`
        switch (d.kind) {
          case "timeout":
            sent += yield* send(row.id, { _tag: "Expire", startedAt: d.seen, children }, msgID)
            break
          case "idle":
            sent += yield* send(row.id, { _tag: "Idle", lastActivityAt: d.seen, children }, msgID)
            break
          case "auto_delete":
            sent += yield* send(row.id, { _tag: "AutoDelete", stoppedAt: d.seen, children }, msgID)
            break
        }
      }
      return sent
    })

    const sweep = Effect.gen(function*() {
      let sent = 0
      for (const part of [hostsDown, timeouts, lapses]) {
        sent += yield* part.pipe(
          Effect.catchCause((cause) =>
            Effect.as(Effect.logWarning("supervisor: sweep failed", { cause: String(cause) }), 0)
          )
        )
      }
      return sent
    }).pipe(Effect.provideService(Nats, nats))

    yield* Effect.forkScoped(Effect.repeat(sweep, Schedule.spaced(Duration.millis(intervalMs))))
    return SandboxSupervisor.of({ sweep })
  })

  /** Needs `SqlClient`, `Nats` and `Hosts`; sweeps for the layer's lifetime. */
  static readonly layer = (options?: SupervisorOptions) =>
    Layer.effect(SandboxSupervisor, SandboxSupervisor.make(options))
}
