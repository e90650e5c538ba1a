/**
 * The `templates` table (migrations 0460, 0730): a row per template of an org, its build's state and,
 * once built, its image (root, layers, env, commands; for one from an OCI image, its reference and
 * digest, default cwd, user and exposed ports); `deleted_at` once deleted (its layers are
 * then collected, `Collect.ts`). The rows as the API shows them (`toRecord`), and the two roots
 * (`base`, `debian`, `code`) that have no row.
 */
import * as Rows from "@svc/db/Rows"
import { BASE_TEMPLATE_ID, CODE_TEMPLATE_ID, DEBIAN_TEMPLATE_ID } from "@svc/domain/Ids"
import { Template } from "@svc/domain/Template"
import { Effect, Schema } from "effect"
import type { SqlClient } from "effect/sql"

export const Row = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  name: Schema.String,
  base: Schema.String,
  root: Schema.Literals(["base", "debian", "code"]),
  layers: Schema.Array(Schema.String),
  env: Schema.Record(Schema.String, Schema.String),
  start_cmd: Schema.NullOr(Schema.String),
  ready_cmd: Schema.NullOr(Schema.String),
  state: Schema.Literals(["building", "ready", "failed"]),
  image: Schema.NullOr(Schema.String),
  error_message: Schema.NullOr(Schema.String),
  build_log: Schema.NullOr(Schema.String),
  host_id: Schema.NullOr(Schema.String),
  deadline_at: Schema.Date,
  created_at: Schema.Date,
  built_at: Schema.NullOr(Schema.Date),
  pool_size: Schema.Int,
  pool_host_id: Schema.NullOr(Schema.String),
  image_ref: Schema.NullOr(Schema.String),
  image_digest: Schema.NullOr(Schema.String),
  workdir: Schema.NullOr(Schema.String),
  run_as: Schema.NullOr(Schema.String),
  exposed_ports: Schema.Array(Schema.Int)
})
export type Row = typeof Row.Type
export const COLUMNS = `id, org_id, name, base, root, layers, env, start_cmd, ready_cmd, state, image, error_message,
  build_log, host_id, deadline_at, created_at, built_at, pool_size, pool_host_id, image_ref, image_digest, workdir, run_as,
  exposed_ports`

export const rows = Rows.decoder("Templates", Row)
export const counted = Rows.decoder("Templates.count", Schema.Struct({ n: Schema.Int }))
export const used = Rows.decoder("Templates.inUse", Schema.Struct({ id: Schema.String }))
export const layerRows = Rows.decoder("Templates.layers", Schema.Struct({ layer: Schema.String }))

export const BASE_RECORD = (): Template =>
  new Template({
    id: BASE_TEMPLATE_ID,
    name: "base",
    state: "ready",
    image: null,
    base: "base",
    errorMessage: null,
    start_cmd: null,
    ready_cmd: null,
    createdAt: new Date(0).toISOString(),
    builtAt: new Date(0).toISOString(),
    pool_size: 0,
    image_ref: null,
    image_digest: null
  })

export const DEBIAN_RECORD = (): Template =>
  new Template({ ...BASE_RECORD(), id: DEBIAN_TEMPLATE_ID, name: "debian", base: "debian" })

export const CODE_RECORD = (): Template =>
  new Template({ ...BASE_RECORD(), id: CODE_TEMPLATE_ID, name: "code", base: "code" })

/** The built-in roots' templates (no row): their ids. */
export const isBuiltIn = (id: string) => id === BASE_TEMPLATE_ID || id === DEBIAN_TEMPLATE_ID || id === CODE_TEMPLATE_ID

/** What a template's `base` shows for its parent: the roots by name, any other by id. */
export const baseName = (id: string) =>
  id === BASE_TEMPLATE_ID ? "base" : id === DEBIAN_TEMPLATE_ID ? "debian" : id === CODE_TEMPLATE_ID ? "code" : id

export const toRecord = (row: Row) =>
  new Template({
    id: row.id,
    name: row.name,
    state: row.state,
    image: row.image,
    base: row.base,
    errorMessage: row.error_message,
    start_cmd: row.start_cmd,
    ready_cmd: row.ready_cmd,
    createdAt: row.created_at.toISOString(),
    builtAt: row.built_at?.toISOString() ?? null,
    pool_size: row.pool_size,
    image_ref: row.image_ref,
    image_digest: row.image_digest
  })

/** The org's live template `ref` (its id, or else its name). */
export const find = (sql: SqlClient.SqlClient, orgId: string, ref: string) =>
  rows(sql`SELECT ${sql.literal(COLUMNS)} FROM templates
    WHERE org_id = ${orgId} AND deleted_at IS NULL AND (id = ${ref} OR name = ${ref})
    ORDER BY (id = ${ref}) DESC LIMIT 1`).pipe(Effect.map((r) => r[0]))
