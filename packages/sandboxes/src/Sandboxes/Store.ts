/**
 * The sandbox actor's store: the `sandboxes` table (migration 0200), one row per sandbox with
 * a `version` for the runtime's compare-and-set. The API lists and filters the same rows with
 * SQL, so the state is columns, not a JSON blob.
 */
import type { ActorStore, Stored } from "@svc/actors/Actor"
import { CorruptState } from "@svc/actors/Errors"
import { Effect, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { SandboxActorState } from "./Model.ts"

/** The columns in `SELECT` order (kept in one place for the API's list queries). */
export const COLUMNS = `id, org_id, name, template_id, template_name, host_id, parent_id, state, type, region,
  datacenter, agent_ready, runtime_ready, runtime_reason, cpu, ram_mb, disk_gb, vsock_cid, internal_ip,
  exposed_ports, volume_attachments, metadata, error_message, timeout_s, created_at, started_at, stopped_at,
  deleted_at, state_since, last_report_at, created_emitted, version`

export interface SandboxRow {
  readonly id: string
  readonly org_id: string
  readonly name: string
  readonly template_id: string
  readonly template_name: string
  readonly host_id: string | null
  readonly parent_id: string | null
  readonly state: string
  readonly type: string
  readonly region: string
  readonly datacenter: string | null
  readonly agent_ready: boolean
  readonly runtime_ready: boolean
  readonly runtime_reason: string | null
  readonly cpu: number | string
  readonly ram_mb: number | string
  readonly disk_gb: number | string
  readonly vsock_cid: number | string | null
  readonly internal_ip: string | null
  readonly exposed_ports: unknown
  readonly volume_attachments: unknown
  readonly metadata: unknown
  readonly error_message: string | null
  readonly timeout_s: number | string | null
  readonly created_at: Date
  readonly started_at: Date | null
  readonly stopped_at: Date | null
  readonly deleted_at: Date | null
  readonly state_since: Date
  readonly last_report_at: number | string | bigint | null
  readonly created_emitted: boolean
  readonly version: number | string | bigint
}

const decodeState = Schema.decodeUnknownEffect(SandboxActorState)
const ms = (d: Date | null) => (d === null ? null : d.getTime())
const num = (n: number | string | bigint | null) => (n === null ? null : Number(n))
// jsonb may arrive parsed or as text depending on the codec: accept both.
const json = (v: unknown) => (typeof v === "string" ? JSON.parse(v) : v)

/** A row as the actor's state (checked: a row the schema refuses is `CorruptState`). */
export const fromRow = (row: SandboxRow): Effect.Effect<Stored<SandboxActorState>, CorruptState> =>
  Effect.try({
    try: () => ({
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
      cpu: num(row.cpu),
      ramMb: num(row.ram_mb),
      diskGb: num(row.disk_gb),
      vsockCid: num(row.vsock_cid),
      internalIp: row.internal_ip,
      exposedPorts: json(row.exposed_ports),
      volumeAttachments: json(row.volume_attachments),
      metadata: json(row.metadata),
      errorMessage: row.error_message,
      timeoutS: num(row.timeout_s),
      createdAt: row.created_at.getTime(),
      startedAt: ms(row.started_at),
      stoppedAt: ms(row.stopped_at),
      deletedAt: ms(row.deleted_at),
      stateSince: row.state_since.getTime(),
      lastReportAt: num(row.last_report_at),
      createdEmitted: row.created_emitted
    }),
    catch: (e) => new CorruptState({ type: "sandbox", id: row.id, message: String(e) })
  }).pipe(
    Effect.flatMap((raw) =>
      Effect.mapError(decodeState(raw), (e) => new CorruptState({ type: "sandbox", id: row.id, message: e.message }))
    ),
    Effect.map((state) => ({ version: Number(row.version), state }))
  )

const date = (n: number | null) => (n === null ? null : new Date(n))

export const store: ActorStore<SandboxActorState> = {
  load: Effect.fnUntraced(function*(id: string) {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<SandboxRow>`SELECT ${sql.literal(COLUMNS)} FROM sandboxes WHERE id = ${id}`
    if (rows.length === 0) return Option.none<Stored<SandboxActorState>>()
    return Option.some(yield* fromRow(rows[0]!))
  }),
  save: Effect.fnUntraced(function*(id: string, s: SandboxActorState, expected: number | undefined) {
    const sql = yield* SqlClient.SqlClient
    if (s.id !== id) return yield* new CorruptState({ type: "sandbox", id, message: `state of ${s.id} saved under ${id}` })
    const ports = JSON.stringify(s.exposedPorts)
    const volumes = JSON.stringify(s.volumeAttachments)
    const metadata = JSON.stringify(s.metadata)
    const rows = expected === undefined
      ? yield* sql`
          INSERT INTO sandboxes (id, org_id, name, template_id, template_name, host_id, parent_id, state, type, region,
            datacenter, agent_ready, runtime_ready, runtime_reason, cpu, ram_mb, disk_gb, vsock_cid, internal_ip,
            exposed_ports, volume_attachments, metadata, error_message, timeout_s, created_at, started_at, stopped_at,
            deleted_at, state_since, last_report_at, created_emitted, version)
          VALUES (${s.id}, ${s.orgId}, ${s.name}, ${s.templateId}, ${s.templateName}, ${s.hostId}, ${s.parentId},
            ${s.state}, ${s.type}, ${s.region}, ${s.datacenter}, ${s.agentReady}, ${s.runtimeReady}, ${s.runtimeReason},
            ${s.cpu}, ${s.ramMb}, ${s.diskGb}, ${s.vsockCid}, ${s.internalIp}, ${ports}::jsonb, ${volumes}::jsonb,
            ${metadata}::jsonb, ${s.errorMessage}, ${s.timeoutS}, ${new Date(s.createdAt)}, ${date(s.startedAt)},
            ${date(s.stoppedAt)}, ${date(s.deletedAt)}, ${new Date(s.stateSince)}, ${s.lastReportAt}, ${s.createdEmitted}, 1)
          ON CONFLICT (id) DO NOTHING RETURNING version`
      : yield* sql`
          UPDATE sandboxes SET
            name = ${s.name}, host_id = ${s.hostId}, state = ${s.state}, region = ${s.region}, datacenter = ${s.datacenter},
            agent_ready = ${s.agentReady}, runtime_ready = ${s.runtimeReady}, runtime_reason = ${s.runtimeReason},
            vsock_cid = ${s.vsockCid}, internal_ip = ${s.internalIp}, exposed_ports = ${ports}::jsonb,
            volume_attachments = ${volumes}::jsonb, metadata = ${metadata}::jsonb, error_message = ${s.errorMessage},
            started_at = ${date(s.startedAt)}, stopped_at = ${date(s.stoppedAt)}, deleted_at = ${date(s.deletedAt)},
            state_since = ${new Date(s.stateSince)}, last_report_at = ${s.lastReportAt},
            created_emitted = ${s.createdEmitted}, version = version + 1
          WHERE id = ${id} AND version = ${expected} RETURNING version`
    return rows.length === 1
  })
}
