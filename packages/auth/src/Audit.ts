/**
 * The audit log (docs/contract.md#audit-log): one row per security-relevant change, written by the
 * caller inside the transaction of the change itself (so an entry exists exactly when the change
 * committed). There is no update or delete path here, and the table's trigger refuses both.
 */
import * as Rows from "@svc/db/Rows"
import {
  AuditAction,
  type AuditActor,
  AuditActorType,
  type AuditEntry,
  type AuditPage,
  type AuditQuery
} from "@svc/domain/Api/Audit"
import { AuditId, makeId, type OrgId } from "@svc/domain/Ids"
import { pageInfo } from "@svc/domain/Pagination"
import { formatTimestamp } from "@svc/domain/Time"
import { Clock, Context, DateTime, Effect, Layer, Option, Schema } from "effect"
import { SqlClient, type SqlError } from "effect/sql"

/** Who is acting and from where; built once per request. */
export interface AuditContext {
  readonly actor: AuditActor
  readonly ip: string | null
  readonly userAgent: string | null
}

/** The operator CLI (no request, no user). */
export const operatorContext: AuditContext = { actor: { type: "operator", id: null }, ip: null, userAgent: null }

const MAX_USER_AGENT = 512
const MAX_IP = 64

const AuditRow = Schema.Struct({
  id: AuditId,
  action: AuditAction,
  actor_type: AuditActorType,
  actor_id: Schema.NullOr(Schema.String),
  target_id: Schema.NullOr(Schema.String),
  ip: Schema.NullOr(Schema.String),
  user_agent: Schema.NullOr(Schema.String),
  created_at: Rows.Timestamptz
})

const toEntry = (row: typeof AuditRow.Type): AuditEntry => ({
  id: row.id,
  action: row.action,
  actor: { type: row.actor_type, id: row.actor_id },
  target_id: row.target_id,
  ip: row.ip,
  user_agent: row.user_agent,
  createdAt: DateTime.makeUnsafe(row.created_at)
})

const Total = Schema.Struct({ total: Rows.Int8 })
const Filter = { orgId: Schema.String, action: Schema.NullOr(Schema.String) }

export class Audit extends Context.Service<Audit, {
  /** Appends an entry; call it inside the transaction of the change it records. */
  readonly record: (
    orgId: OrgId,
    action: AuditAction,
    targetId: string | null,
    context: AuditContext
  ) => Effect.Effect<void, SqlError.SqlError>
  readonly list: (orgId: OrgId, query: AuditQuery) => Effect.Effect<AuditPage, Rows.QueryError>
}>()("@svc/auth/Audit") {
  static readonly layer = Layer.effect(
    Audit,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const page = Rows.findAll("Audit.list", {
        Request: Schema.Struct({ ...Filter, limit: Schema.Number, offset: Schema.Number }),
        Result: AuditRow,
        execute: ({ action, limit, offset, orgId }) =>
          sql`
            SELECT id, action, actor_type, actor_id, target_id, ip, user_agent, created_at FROM audit_log
            WHERE org_id = ${orgId} AND (${action}::text IS NULL OR action = ${action})
            ORDER BY created_at DESC, id DESC LIMIT ${limit} OFFSET ${offset}
          `
      })
      const total = Rows.findOneOption("Audit.total", {
        Request: Schema.Struct(Filter),
        Result: Total,
        execute: ({ action, orgId }) =>
          sql`
            SELECT count(*) AS total FROM audit_log
            WHERE org_id = ${orgId} AND (${action}::text IS NULL OR action = ${action})
          `
      })

      const record = Effect.fn("Audit.record")(function*(
        orgId: OrgId,
        action: AuditAction,
        targetId: string | null,
        context: AuditContext
      ) {
        const now = yield* Clock.currentTimeMillis
        yield* sql`
          INSERT INTO audit_log (id, org_id, action, actor_type, actor_id, target_id, ip, user_agent, created_at)
          VALUES (${makeId("audit", now)}, ${orgId}, ${action}, ${context.actor.type}, ${context.actor.id},
                  ${targetId}, ${context.ip?.slice(0, MAX_IP) ?? null},
                  ${context.userAgent?.slice(0, MAX_USER_AGENT) ?? null}, ${formatTimestamp(now)})
        `
      })

      const list = Effect.fn("Audit.list")(function*(orgId: OrgId, query: AuditQuery) {
        const action = query.action ?? null
        const [rows, counted] = yield* Effect.all([
          page({ orgId, action, limit: query.limit, offset: query.offset }),
          total({ orgId, action })
        ], { concurrency: 2 })
        const n = Option.match(counted, { onNone: () => 0, onSome: (c) => Number(c.total) })
        return { entries: rows.map(toEntry), ...pageInfo(query, rows.length, n) }
      })

      return Audit.of({ record, list })
    })
  )
}
