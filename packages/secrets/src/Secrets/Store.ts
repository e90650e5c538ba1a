/**
 * The `secrets` table (migration 0431) and the bindings it touches in `sandboxes.secret_ids`.
 * Every statement is confined to one org; deleted secrets (`deleted_at`) are invisible here.
 * The value column holds the value sealed by SecretBox, never the plaintext, and the metadata
 * queries never read it.
 */
import * as Rows from "@svc/db/Rows"
import type { SecretId } from "@svc/domain/Ids"
import { NetworkPolicy } from "@svc/domain/Network"
import type { Secret } from "@svc/domain/Secret"
import { DateTime, Effect, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"

const META = "id, org_id, name, allowed_hosts, header_name, header_format, created_at, rotated_at"

export const SecretRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  name: Schema.String,
  allowed_hosts: Schema.Array(Schema.String),
  header_name: Schema.String,
  header_format: Schema.String,
  created_at: Rows.Timestamptz,
  rotated_at: Schema.NullOr(Rows.Timestamptz)
})
export type SecretRow = typeof SecretRow.Type

/** A row with its sealed value (for the `egress` KV entry). */
export const SealedRow = Schema.Struct({ ...SecretRow.fields, sealed_value: Schema.String })
export type SealedRow = typeof SealedRow.Type

export const toSecret = (row: SecretRow): Secret => ({
  id: row.id as SecretId,
  name: row.name,
  allowed_hosts: row.allowed_hosts,
  header_name: row.header_name,
  header_format: row.header_format,
  createdAt: DateTime.fromDateUnsafe(row.created_at),
  rotatedAt: row.rotated_at === null ? null : DateTime.fromDateUnsafe(row.rotated_at)
})

const metaRows = Rows.decoder("Secrets.rows", SecretRow)
const sealedRows = Rows.decoder("Secrets.sealed", SealedRow)
const counted = Rows.decoder("Secrets.count", Schema.Struct({ n: Schema.Int }))
const BoundSandbox = Schema.Struct({
  id: Schema.String,
  state: Schema.String,
  org_id: Schema.String,
  network: NetworkPolicy,
  secret_ids: Schema.Array(Schema.String)
})
const boundRows = Rows.decoder("Secrets.unbind", BoundSandbox)
export type BoundSandbox = typeof BoundSandbox.Type

const first = <A>(rows: ReadonlyArray<A>) => Option.fromNullishOr(rows[0])

export const insert = (input: {
  readonly id: string
  readonly orgId: string
  readonly name: string
  readonly allowedHosts: ReadonlyArray<string>
  readonly headerName: string
  readonly headerFormat: string
  readonly sealedValue: string
}) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sealedRows(sql`
        INSERT INTO secrets (id, org_id, name, allowed_hosts, header_name, header_format, sealed_value)
        VALUES (${input.id}, ${input.orgId}, ${input.name}, ${[...input.allowedHosts]}::text[], ${input.headerName},
                ${input.headerFormat}, ${input.sealedValue})
        ON CONFLICT (org_id, name) WHERE deleted_at IS NULL DO NOTHING
        RETURNING ${sql.literal(META)}, sealed_value`),
      first
    ))

export const find = (orgId: string, id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      metaRows(sql`SELECT ${sql.literal(META)} FROM secrets
        WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL`),
      first
    ))

export const page = (orgId: string, limit: number, offset: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all([
      metaRows(sql`SELECT ${sql.literal(META)} FROM secrets WHERE org_id = ${orgId} AND deleted_at IS NULL
        ORDER BY created_at DESC, id DESC LIMIT ${limit}::int OFFSET ${offset}::int`),
      Effect.map(
        counted(sql`SELECT count(*)::int AS n FROM secrets WHERE org_id = ${orgId} AND deleted_at IS NULL`),
        (rows) => rows[0]?.n ?? 0
      )
    ], { concurrency: 2 }))

/** Sets the fields given (null: unchanged), row-locked to the commit; the row after, or none. */
export const update = (orgId: string, id: string, fields: {
  readonly allowedHosts: ReadonlyArray<string> | null
  readonly headerName: string | null
  readonly headerFormat: string | null
  readonly sealedValue: string | null
}) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sealedRows(sql`
        UPDATE secrets SET
          allowed_hosts = COALESCE(${
        fields.allowedHosts === null ? null : [...fields.allowedHosts]
      }::text[], allowed_hosts),
          header_name = COALESCE(${fields.headerName}::text, header_name),
          header_format = COALESCE(${fields.headerFormat}::text, header_format),
          sealed_value = COALESCE(${fields.sealedValue}::text, sealed_value),
          rotated_at = CASE WHEN ${fields.sealedValue}::text IS NULL THEN rotated_at ELSE now() END,
          updated_at = now()
        WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL
        RETURNING ${sql.literal(META)}, sealed_value`),
      first
    ))

/**
 * Deletes the secret and removes it from every sandbox it is bound to; returns the secret's row
 * (none: no such live secret) and the sandboxes changed (their egress entries must be put).
 *
 * Locks in the order bindings take them, sandbox rows first (ordered by id), then the secret, so
 * that a concurrent binding and this deletion never wait on each other in a cycle. A binding that
 * committed between the first look and the secret's lock is found by the second.
 */
export const removeEverywhere = (orgId: string, id: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const lockBound = sql`SELECT id FROM sandboxes WHERE org_id = ${orgId} AND secret_ids @> ARRAY[${id}]::text[]
      ORDER BY id FOR UPDATE`
    yield* lockBound
    const deleted = first(
      yield* metaRows(sql`
        UPDATE secrets SET deleted_at = now(), updated_at = now()
        WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL
        RETURNING ${sql.literal(META)}`)
    )
    if (Option.isNone(deleted)) return { deleted, sandboxes: [] as ReadonlyArray<BoundSandbox> }
    yield* lockBound
    // `version` moves: an actor transition that loaded the row before retries on top of this;
    // the sandbox actor's transition log (`actor_inbox`) records the new version.
    const sandboxes = yield* boundRows(sql`
      WITH bumped AS (
        UPDATE sandboxes SET secret_ids = array_remove(secret_ids, ${id}), version = version + 1
        WHERE org_id = ${orgId} AND secret_ids @> ARRAY[${id}]::text[]
        RETURNING id, state, org_id, network, secret_ids, version
      ), logged AS (
        INSERT INTO actor_inbox (type, entity_id, msg_id, version)
        SELECT 'sandbox', id, ${`secret-deleted:${id}`}, version FROM bumped
      )
      SELECT id, state, org_id, network, secret_ids FROM bumped`)
    return { deleted, sandboxes }
  })

/**
 * The org's live secret `ref` (its id, or else its name) with its sealed value: what a template
 * build from a private image carries to its host (still sealed; the host opens it).
 */
export const findSealed = (orgId: string, ref: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sealedRows(sql`SELECT ${sql.literal(META)}, sealed_value FROM secrets
        WHERE org_id = ${orgId} AND deleted_at IS NULL AND (id = ${ref} OR name = ${ref})
        ORDER BY (id = ${ref}) DESC LIMIT 1`),
      first
    ))
