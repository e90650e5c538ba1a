/**
 * What keeps sandboxes from hanging, in the runtime role: every `intervalMs` it
 * - sends `HostDown` to each sandbox (not yet `error` or `deleted`) whose host's record is
 *   older than `HOST_DOWN_AFTER_MS` or gone;
 * - sends `Timeout` to each sandbox waiting in `pending`, `starting`, `stopping` or `deleting`
 *   for longer than the transition timeout (`SVC_SANDBOX_TRANSITION_TIMEOUT`, default 2m);
 * - sends `Expire` to each running sandbox past its `timeout_s`.
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
import type { SandboxMessage } from "./Model.ts"

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
const waiting = Rows.decoder(
  "SandboxSupervisor.timeouts",
  Schema.Struct({ id: Schema.String, state: SandboxState, state_since: Rows.Timestamptz })
)
const expired = Rows.decoder(
  "SandboxSupervisor.expiries",
  Schema.Struct({ id: Schema.String, started_at: Rows.Timestamptz })
)

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
      const rows = yield* onDownHosts(sql`
        SELECT id, host_id FROM sandboxes
        WHERE host_id IS NOT NULL AND state NOT IN ('deleted', 'error') AND NOT (host_id = ANY(${live}::text[]))
        LIMIT ${batch}`)
      let sent = 0
      for (const row of rows) {
        const lastSeenAt = all.find((h) => h.hostId === row.host_id)?.heartbeatAt ?? null
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

    const expiries = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const rows = yield* expired(sql`
        SELECT id, started_at FROM sandboxes
        WHERE state = 'running' AND timeout_s IS NOT NULL
          AND started_at + make_interval(secs => timeout_s) < ${new Date(now)}
        LIMIT ${batch}`)
      let sent = 0
      for (const row of rows) {
        const startedAt = row.started_at.getTime()
        sent += yield* send(row.id, { _tag: "Expire", startedAt }, `expire:${row.id}:${startedAt}`)
      }
      return sent
    })

    const sweep = Effect.gen(function*() {
      let sent = 0
      for (const part of [hostsDown, timeouts, expiries]) {
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
