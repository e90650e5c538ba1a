/**
 * The audit log (docs/contract.md#audit-log): one row per security-relevant change, written by the
 * caller inside the transaction of the change itself (so an entry exists exactly when the change
 * committed). There is no update or delete path here, and the table's trigger refuses both.
 */
import type { AuditAction, AuditActor, AuditEntry, AuditPage, AuditQuery } from "@svc/domain/Api/Audit"
import { type AuditId, makeId, type OrgId } from "@svc/domain/Ids"
import { pageInfo } from "@svc/domain/Pagination"
import { formatTimestamp } from "@svc/domain/Time"
import { Clock, Context, DateTime, Effect, Layer } from "effect"
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

interface AuditRow {
  readonly id: string
  readonly action: string
  readonly actor_type: string
  readonly actor_id: string | null
  readonly target_id: string | null
  readonly ip: string | null
  readonly user_agent: string | null
  readonly created_at: Date
}

const toEntry = (row: AuditRow): AuditEntry => ({
  id: row.id as AuditId,
  action: row.action as AuditAction,
  actor: { type: row.actor_type as AuditActor["type"], id: row.actor_id },
  target_id: row.target_id,
  ip: row.ip,
  user_agent: row.user_agent,
  createdAt: DateTime.makeUnsafe(row.created_at)
})

export class Audit extends Context.Service<Audit, {
  /** Appends an entry; call it inside the transaction of the change it records. */
  readonly record: (
    orgId: OrgId,
    action: AuditAction,
    targetId: string | null,
    context: AuditContext
  ) => Effect.Effect<void, SqlError.SqlError>
  readonly list: (orgId: OrgId, query: AuditQuery) => Effect.Effect<AuditPage, SqlError.SqlError>
}>()("@svc/auth/Audit") {
  static readonly layer = Layer.effect(
    Audit,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient

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
        const [rows, counts] = yield* Effect.all([
          sql<AuditRow>`
            SELECT id, action, actor_type, actor_id, target_id, ip, user_agent, created_at FROM audit_log
            WHERE org_id = ${orgId} AND (${action}::text IS NULL OR action = ${action})
            ORDER BY created_at DESC, id DESC LIMIT ${query.limit} OFFSET ${query.offset}
          `,
          sql<{ readonly total: string | number }>`
            SELECT count(*) AS total FROM audit_log
            WHERE org_id = ${orgId} AND (${action}::text IS NULL OR action = ${action})
          `
        ], { concurrency: 2 })
        const total = Number(counts[0]?.total ?? 0)
        return { entries: rows.map(toEntry), ...pageInfo(query, rows.length, total) }
      })

      return Audit.of({ record, list })
    })
  )
}
