/**
 * The `volumes` table (migration 0450) and the attachments read from `sandboxes`. Every
 * statement is confined to one org; deleted volumes (`deleted_at`) are invisible here.
 *
 * A volume's attachments are the `volume_attachments` entries naming it of the org's sandboxes
 * that are not deleted (a stopped sandbox keeps its volumes: its start mounts them again), oldest
 * sandbox first. They are written by the sandbox's create (under the volume's row lock) and end
 * with the sandbox, so a volume needs no state of its own for them.
 */
import * as Rows from "@svc/db/Rows"
import type { AttachmentId, HostId, SandboxId, VolumeId } from "@svc/domain/Ids"
import { VolumeMode } from "@svc/domain/Sandbox"
import { type Volume, VOLUME_DRIVER, type VolumeAttachmentRef, VolumeType } from "@svc/domain/Volume"
import { DateTime, Effect, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"

const COLUMNS = "id, org_id, name, type, size_gb, host_id, created_at, deleted_at"

export const VolumeRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  name: Schema.String,
  type: VolumeType,
  size_gb: Schema.Int,
  host_id: Schema.NullOr(Schema.String),
  created_at: Rows.Timestamptz,
  deleted_at: Schema.NullOr(Rows.Timestamptz)
})
export type VolumeRow = typeof VolumeRow.Type

const AttachmentRow = Schema.Struct({
  volume_id: Schema.String,
  sandbox_id: Schema.String,
  host_id: Schema.NullOr(Schema.String),
  attachment_id: Schema.String,
  mount_path: Schema.String,
  subpath: Schema.String,
  mode: VolumeMode,
  device_path: Schema.NullOr(Schema.String)
})
type AttachmentRow = typeof AttachmentRow.Type

const volumeRows = Rows.decoder("Volumes.rows", VolumeRow)
const attachmentRows = Rows.decoder("Volumes.attachments", AttachmentRow)
const counted = Rows.decoder("Volumes.count", Schema.Struct({ n: Schema.Int }))

const first = <A>(rows: ReadonlyArray<A>) => Option.fromNullishOr(rows[0])

const ref = (a: AttachmentRow): VolumeAttachmentRef => ({
  attachment_id: a.attachment_id as AttachmentId,
  sandbox_id: a.sandbox_id as SandboxId,
  host_id: a.host_id as HostId | null,
  mount_path: a.mount_path,
  subpath: a.subpath,
  mode: a.mode,
  device_path: a.device_path
})

/** The record: the row, and its attachments (the oldest one fills the singular fields). */
export const toVolume = (row: VolumeRow, attachments: ReadonlyArray<AttachmentRow>): Volume => {
  const refs = attachments.filter((a) => a.volume_id === row.id).map(ref)
  const head = refs[0]
  return {
    id: row.id as VolumeId,
    name: row.name,
    type: row.type,
    driver: VOLUME_DRIVER,
    size_gb: row.size_gb,
    state: row.deleted_at !== null ? "deleted" : head !== undefined ? "attached" : "available",
    mount_path: head?.mount_path ?? null,
    host_id: row.host_id as HostId | null,
    attachment_id: head?.attachment_id ?? null,
    attached_to: head?.sandbox_id ?? null,
    device_path: head?.device_path ?? null,
    auto_attach: {},
    attachments: refs,
    createdAt: DateTime.fromDateUnsafe(row.created_at),
    deletedAt: row.deleted_at === null ? null : DateTime.fromDateUnsafe(row.deleted_at)
  }
}

/** The live attachments of the given volumes of an org, oldest sandbox first. */
export const attachments = (orgId: string, volumeIds: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    if (volumeIds.length === 0) return [] as ReadonlyArray<AttachmentRow>
    const sql = yield* SqlClient.SqlClient
    return yield* attachmentRows(sql`
      SELECT a->>'volume_id' AS volume_id, s.id AS sandbox_id, s.host_id, a->>'attachment_id' AS attachment_id,
             a->>'mount_path' AS mount_path, a->>'subpath' AS subpath, a->>'mode' AS mode,
             a->>'device_path' AS device_path
      FROM sandboxes s CROSS JOIN LATERAL jsonb_array_elements(s.volume_attachments) a
      WHERE s.org_id = ${orgId} AND s.state <> 'deleted' AND s.volume_attachments <> '[]'::jsonb
        AND a->>'volume_id' = ANY(${[...volumeIds]}::text[])
      ORDER BY s.created_at, s.id`)
  })

/** Inserts a volume; none when the org has a live volume of that name. */
export const insert = (input: {
  readonly id: string
  readonly orgId: string
  readonly name: string
  readonly type: VolumeType
  readonly sizeGb: number
}) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      volumeRows(sql`
        INSERT INTO volumes (id, org_id, name, type, size_gb)
        VALUES (${input.id}, ${input.orgId}, ${input.name}, ${input.type}, ${input.sizeGb})
        ON CONFLICT (org_id, name) WHERE deleted_at IS NULL DO NOTHING
        RETURNING ${sql.literal(COLUMNS)}`),
      first
    ))

/** The org's live volume; with `lock`, held `FOR UPDATE` to the commit. */
export const find = (orgId: string, id: string, lock = false) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      volumeRows(sql`SELECT ${sql.literal(COLUMNS)} FROM volumes
        WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL ${sql.literal(lock ? "FOR UPDATE" : "")}`),
      first
    ))

/** Live volumes the org has (for its quota). */
export const countLive = (orgId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      counted(sql`SELECT count(*)::int AS n FROM volumes WHERE org_id = ${orgId} AND deleted_at IS NULL`),
      (rows) => rows[0]?.n ?? 0
    ))

export const page = (orgId: string, limit: number, offset: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all([
      volumeRows(sql`SELECT ${sql.literal(COLUMNS)} FROM volumes WHERE org_id = ${orgId} AND deleted_at IS NULL
        ORDER BY created_at DESC, id DESC LIMIT ${limit}::int OFFSET ${offset}::int`),
      countLive(orgId)
    ], { concurrency: 2 }))

/** Marks the volume deleted; the row after. */
export const markDeleted = (orgId: string, id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      volumeRows(sql`UPDATE volumes SET deleted_at = now()
        WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL RETURNING ${sql.literal(COLUMNS)}`),
      first
    ))
