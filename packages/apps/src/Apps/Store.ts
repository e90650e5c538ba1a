/**
 * The `apps` table (migration 0600): the app actor's store, and the reads of the API. One row
 * per app, the controller's whole state in `state` (jsonb) with a `version` for the runtime's
 * compare-and-set; `deleted_at` is set with the state that says `deleted`, which frees the name
 * and hides the app from the API.
 */
import type { ActorStore, Stored } from "@svc/actors/Actor"
import { CorruptState } from "@svc/actors/Errors"
import * as Rows from "@svc/db/Rows"
import type { App } from "@svc/domain/App"
import type { AppId, SandboxId } from "@svc/domain/Ids"
import { DateTime, Effect, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { AppControllerState } from "./Model.ts"
import { view } from "./Reconcile.ts"

export const APP_ACTOR_TYPE = "app"

const StateJson = Schema.fromJsonString(AppControllerState)
const decodeState = Schema.decodeUnknownEffect(StateJson)
const encodeState = Schema.encodeUnknownEffect(StateJson)

const Row = Schema.Struct({ version: Rows.Int8, state: Schema.String })
const rows = Rows.decoder("Apps.rows", Row)
const counted = Rows.decoder("Apps.count", Schema.Struct({ n: Schema.Int }))

const toStored = (id: string, row: typeof Row.Type) =>
  Effect.map(
    Effect.mapError(
      decodeState(row.state) as Effect.Effect<AppControllerState, Schema.SchemaError>,
      (e) => new CorruptState({ type: APP_ACTOR_TYPE, id, message: e.message })
    ),
    (state): Stored<AppControllerState> => ({ version: Number(row.version), state })
  )

const corrupt = (id: string) => <A, R>(effect: Effect.Effect<A, Rows.QueryError, R>) =>
  Effect.catchTag(
    effect,
    "RowDecodeError",
    (e) => Effect.fail(new CorruptState({ type: APP_ACTOR_TYPE, id, message: e.message }))
  )

export const store: ActorStore<AppControllerState> = {
  load: Effect.fnUntraced(function*(id: string) {
    const sql = yield* SqlClient.SqlClient
    const found = yield* rows(sql`SELECT version, state::text AS state FROM apps WHERE id = ${id}`).pipe(corrupt(id))
    if (found.length === 0) return Option.none()
    return Option.some(yield* toStored(id, found[0]!))
  }),
  save: Effect.fnUntraced(function*(id: string, state: AppControllerState, expected: number | undefined) {
    const sql = yield* SqlClient.SqlClient
    const json = yield* Effect.mapError(
      encodeState(state) as Effect.Effect<string, Schema.SchemaError>,
      (e) => new CorruptState({ type: APP_ACTOR_TYPE, id, message: `new state: ${e.message}` })
    )
    const deleted = state.phase === "deleted"
    const saved = expected === undefined
      ? yield* sql`
          INSERT INTO apps (id, org_id, name, state, version, created_at, updated_at)
          VALUES (${id}, ${state.orgId}, ${state.name}, ${json}::jsonb, 1, ${new Date(state.createdAt)},
                  ${new Date(state.updatedAt)})
          ON CONFLICT DO NOTHING RETURNING version`
      : yield* sql`
          UPDATE apps SET state = ${json}::jsonb, version = version + 1, updated_at = ${new Date(state.updatedAt)},
            deleted_at = CASE WHEN ${deleted} THEN coalesce(deleted_at, now()) ELSE NULL END
          WHERE id = ${id} AND version = ${expected} RETURNING version`
    return saved.length === 1
  })
}

/** The org's app that is not deleted, with its version; with `lock`, held `FOR UPDATE` to the commit. */
export const find = (orgId: string, id: string, lock = false) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const found = yield* rows(sql`SELECT version, state::text AS state FROM apps
      WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL ${sql.literal(lock ? "FOR UPDATE" : "")}`)
    if (found.length === 0) return Option.none<Stored<AppControllerState>>()
    return Option.some(yield* Effect.orDie(toStored(id, found[0]!)))
  })

/** A page of the org's apps (not deleted), newest first, and how many there are. */
export const page = (orgId: string, limit: number, offset: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [found, total] = yield* Effect.all([
      rows(sql`SELECT version, state::text AS state FROM apps WHERE org_id = ${orgId} AND deleted_at IS NULL
        ORDER BY created_at DESC, id DESC LIMIT ${limit}::int OFFSET ${offset}::int`),
      counted(sql`SELECT count(*)::int AS n FROM apps WHERE org_id = ${orgId} AND deleted_at IS NULL`)
    ], { concurrency: 2 })
    const states = yield* Effect.forEach(found, (row) => Effect.orDie(toStored("?", row)))
    return [states.map((s) => s.state), total[0]?.n ?? 0] as const
  })

/** The ids of every app not deleted (the reconcile's round). */
export const liveIds = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const found = yield* Rows.decoder("Apps.liveIds", Schema.Struct({ id: Schema.String }))(
    sql`SELECT id FROM apps WHERE deleted_at IS NULL ORDER BY id`
  )
  return found.map((r) => r.id)
})

/** The app a sandbox is a replica of (its `metadata.app_id`, an app of the sandbox's own org). */
export const appOfSandbox = (sandboxId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const found = yield* Rows.decoder("Apps.appOfSandbox", Schema.Struct({ id: Schema.String }))(sql`
      SELECT a.id FROM sandboxes s JOIN apps a ON a.id = s.metadata->>'app_id' AND a.org_id = s.org_id
      WHERE s.id = ${sandboxId} AND a.deleted_at IS NULL`)
    return Option.fromNullishOr(found[0]?.id)
  })

/** The record the API shows. */
export const toRecord = (s: AppControllerState): App => {
  const v = view(s)
  return {
    id: s.id as AppId,
    name: s.name,
    template: s.template,
    cmd: s.cmd,
    replicas: s.replicas,
    ready_replicas: v.readyReplicas,
    state: v.state,
    sandbox_ids: v.sandboxIds as ReadonlyArray<SandboxId>,
    exposed_ports: s.exposedPorts,
    revision: s.revision,
    reason: v.reason,
    createdAt: DateTime.makeUnsafe(s.createdAt),
    updatedAt: DateTime.makeUnsafe(s.updatedAt)
  }
}
