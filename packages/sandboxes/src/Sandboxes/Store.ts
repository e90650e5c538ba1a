/**
 * The sandbox actor's store: the `sandboxes` table (migration 0200), one row per sandbox with
 * a `version` for the runtime's compare-and-set. The API lists and filters the same rows with
 * SQL, so the state is columns, not a JSON blob.
 */
import type { ActorStore, Stored } from "@svc/actors/Actor"
import { CorruptState } from "@svc/actors/Errors"
import * as Rows from "@svc/db/Rows"
import { Effect, Option, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import * as Lifecycle from "./Lifecycle.ts"
import { SandboxActorState } from "./Model.ts"

/** The columns in `SELECT` order (kept in one place for the API's list queries). */
export const COLUMNS = `id, org_id, name, template_id, template_name, host_id, parent_id, state, type, region,
  datacenter, agent_ready, runtime_ready, runtime_reason, cpu, ram_mb, disk_gb, vsock_cid, internal_ip,
  exposed_ports, volume_attachments, metadata, error_message, network, secret_ids, timeout_s, created_at, started_at,
  stopped_at, deleted_at, state_since, last_report_at, created_emitted, version,
  idle_timeout_s, on_timeout, auto_delete_s, auto_resume, timeout_from, last_activity_at, busy, stop_reason`

const field = SandboxActorState.fields

/**
 * A row of `sandboxes` (`COLUMNS`): each column checked by the schema of the state field it
 * holds, times as the driver returns them (`toStored` converts).
 */
export const SandboxRow = Schema.Struct({
  id: field.id,
  org_id: field.orgId,
  name: field.name,
  template_id: field.templateId,
  template_name: field.templateName,
  host_id: field.hostId,
  parent_id: field.parentId,
  state: field.state,
  type: field.type,
  region: field.region,
  datacenter: field.datacenter,
  agent_ready: field.agentReady,
  runtime_ready: field.runtimeReady,
  runtime_reason: field.runtimeReason,
  cpu: field.cpu,
  ram_mb: field.ramMb,
  disk_gb: field.diskGb,
  vsock_cid: field.vsockCid,
  internal_ip: field.internalIp,
  exposed_ports: field.exposedPorts,
  volume_attachments: field.volumeAttachments,
  metadata: field.metadata,
  error_message: field.errorMessage,
  network: field.network,
  secret_ids: field.secretIds,
  timeout_s: field.timeoutS,
  created_at: Rows.Timestamptz,
  started_at: Schema.NullOr(Rows.Timestamptz),
  stopped_at: Schema.NullOr(Rows.Timestamptz),
  deleted_at: Schema.NullOr(Rows.Timestamptz),
  state_since: Rows.Timestamptz,
  last_report_at: Schema.NullOr(Rows.Int8),
  created_emitted: field.createdEmitted,
  version: Rows.Int8,
  idle_timeout_s: field.idleTimeoutS,
  on_timeout: field.onTimeout,
  auto_delete_s: field.autoDeleteS,
  auto_resume: field.autoResume,
  timeout_from: Schema.NullOr(Rows.Timestamptz),
  last_activity_at: Schema.NullOr(Rows.Timestamptz),
  busy: field.busy,
  stop_reason: field.stopReason
})

const ms = (d: Date | null) => (d === null ? null : d.getTime())

/** A decoded row as what the actor store holds. */
export const toStored = (row: typeof SandboxRow.Type): Stored<SandboxActorState> => ({
  version: Number(row.version),
  state: {
    id: row.id,
    orgId: row.org_id,
    name: row.name,
    templateId: row.template_id,
    templateName: row.template_name,
    hostId: row.host_id,
    parentId: row.parent_id,
    state: row.state,
    type: row.type,
    region: row.region,
    datacenter: row.datacenter,
    agentReady: row.agent_ready,
    runtimeReady: row.runtime_ready,
    runtimeReason: row.runtime_reason,
    cpu: row.cpu,
    ramMb: row.ram_mb,
    diskGb: row.disk_gb,
    vsockCid: row.vsock_cid,
    internalIp: row.internal_ip,
    exposedPorts: row.exposed_ports,
    volumeAttachments: row.volume_attachments,
    metadata: row.metadata,
    errorMessage: row.error_message,
    network: row.network,
    secretIds: row.secret_ids,
    timeoutS: row.timeout_s,
    createdAt: row.created_at.getTime(),
    startedAt: ms(row.started_at),
    stoppedAt: ms(row.stopped_at),
    deletedAt: ms(row.deleted_at),
    stateSince: row.state_since.getTime(),
    lastReportAt: row.last_report_at === null ? null : Number(row.last_report_at),
    createdEmitted: row.created_emitted,
    idleTimeoutS: row.idle_timeout_s,
    onTimeout: row.on_timeout,
    autoDeleteS: row.auto_delete_s,
    autoResume: row.auto_resume,
    timeoutFrom: ms(row.timeout_from),
    lastActivityAt: ms(row.last_activity_at),
    busy: row.busy,
    stopReason: row.stop_reason
  }
})

const loaded = Rows.decoder("SandboxStore.load", SandboxRow)

const date = (n: number | null) => (n === null ? null : new Date(n))

/** The compare-and-set (`ActorStore.saveStep`): writes only where `guard` holds too. */
const saveStep = (
  sql: SqlClient.SqlClient,
  id: string,
  s: SandboxActorState,
  expected: number | undefined,
  guard: Statement.Fragment
): Effect.Effect<Statement.Statement<unknown>, CorruptState> => {
  if (s.id !== id) {
    return Effect.fail(new CorruptState({ type: "sandbox", id, message: `state of ${s.id} saved under ${id}` }))
  }
  const ports = JSON.stringify(s.exposedPorts)
  const volumes = JSON.stringify(s.volumeAttachments)
  const metadata = JSON.stringify(s.metadata)
  const network = JSON.stringify(s.network)
  const secretIds = [...s.secretIds]
  const dueAt = date(Lifecycle.dueAt(s))
  const statement = expected === undefined
    ? sql`
          INSERT INTO sandboxes (id, org_id, name, template_id, template_name, host_id, parent_id, state, type, region,
            datacenter, agent_ready, runtime_ready, runtime_reason, cpu, ram_mb, disk_gb, vsock_cid, internal_ip,
            exposed_ports, volume_attachments, metadata, error_message, network, secret_ids, timeout_s, created_at,
            started_at, stopped_at, deleted_at, state_since, last_report_at, created_emitted, version,
            idle_timeout_s, on_timeout, auto_delete_s, auto_resume, timeout_from, last_activity_at, busy, stop_reason,
            due_at)
          SELECT ${s.id}, ${s.orgId}, ${s.name}, ${s.templateId}, ${s.templateName}, ${s.hostId}, ${s.parentId},
            ${s.state}, ${s.type}, ${s.region}, ${s.datacenter}, ${s.agentReady}, ${s.runtimeReady}, ${s.runtimeReason},
            ${s.cpu}, ${s.ramMb}, ${s.diskGb}, ${s.vsockCid}, ${s.internalIp}, ${ports}::jsonb, ${volumes}::jsonb,
            ${metadata}::jsonb, ${s.errorMessage}, ${network}::jsonb, ${secretIds}::text[], ${s.timeoutS}, ${new Date(
      s.createdAt
    )}, ${date(s.startedAt)},
            ${date(s.stoppedAt)}, ${date(s.deletedAt)}, ${new Date(
      s.stateSince
    )}, ${s.lastReportAt}, ${s.createdEmitted}, 1,
            ${s.idleTimeoutS}, ${s.onTimeout}, ${s.autoDeleteS}, ${s.autoResume}, ${date(s.timeoutFrom)},
            ${date(s.lastActivityAt)}, ${s.busy}, ${s.stopReason}, ${dueAt}
          WHERE ${guard}
          ON CONFLICT (id) DO NOTHING RETURNING version`
    : sql`
          UPDATE sandboxes SET
            name = ${s.name}, host_id = ${s.hostId}, state = ${s.state}, region = ${s.region}, datacenter = ${s.datacenter},
            agent_ready = ${s.agentReady}, runtime_ready = ${s.runtimeReady}, runtime_reason = ${s.runtimeReason},
            vsock_cid = ${s.vsockCid}, internal_ip = ${s.internalIp}, exposed_ports = ${ports}::jsonb,
            volume_attachments = ${volumes}::jsonb, metadata = ${metadata}::jsonb, error_message = ${s.errorMessage},
            network = ${network}::jsonb, secret_ids = ${secretIds}::text[],
            started_at = ${date(s.startedAt)}, stopped_at = ${date(s.stoppedAt)}, deleted_at = ${date(s.deletedAt)},
            state_since = ${new Date(s.stateSince)}, last_report_at = ${s.lastReportAt},
            created_emitted = ${s.createdEmitted}, version = version + 1,
            timeout_s = ${s.timeoutS}, idle_timeout_s = ${s.idleTimeoutS}, on_timeout = ${s.onTimeout},
            auto_delete_s = ${s.autoDeleteS}, auto_resume = ${s.autoResume}, timeout_from = ${date(s.timeoutFrom)},
            last_activity_at = ${date(s.lastActivityAt)}, busy = ${s.busy}, stop_reason = ${s.stopReason},
            due_at = ${dueAt}
          WHERE id = ${id} AND version = ${expected} AND ${guard} RETURNING version`
  return Effect.succeed(statement)
}

export const store: ActorStore<SandboxActorState> = {
  load: Effect.fnUntraced(function*(id: string) {
    const sql = yield* SqlClient.SqlClient
    // A row the schema refuses is the actor's corrupt state (the runtime does not apply to it).
    const rows = yield* loaded(sql`SELECT ${sql.literal(COLUMNS)} FROM sandboxes WHERE id = ${id}`).pipe(
      Effect.catchTag(
        "RowDecodeError",
        (e) => Effect.fail(new CorruptState({ type: "sandbox", id, message: e.message }))
      )
    )
    if (rows.length === 0) return Option.none<Stored<SandboxActorState>>()
    return Option.some(toStored(rows[0]!))
  }),
  save: (id: string, s: SandboxActorState, expected: number | undefined) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const rows = yield* yield* saveStep(sql, id, s, expected, sql`TRUE`)
      return rows.length === 1
    }),
  saveStep
}
