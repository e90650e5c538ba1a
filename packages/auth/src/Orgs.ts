/**
 * Orgs: every resource belongs to one (docs/contract.md#overview). Created by sign-up or the
 * operator CLI.
 */
import * as Rows from "@svc/db/Rows"
import type { OrgRecord } from "@svc/domain/Api/Auth"
import { NotFound } from "@svc/domain/Errors"
import { makeId, OrgId } from "@svc/domain/Ids"
import { formatTimestamp } from "@svc/domain/Time"
import { Clock, Context, DateTime, Effect, Layer, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Audit, type AuditContext } from "./Audit.ts"
import { CredentialCache } from "./Auth/CredentialCache.ts"

/** A row of `orgs`. */
const OrgRow = Schema.Struct({ id: OrgId, name: Schema.String, created_at: Rows.Timestamptz })

const toOrgRecord = (row: typeof OrgRow.Type): OrgRecord => ({
  id: row.id,
  name: row.name,
  createdAt: DateTime.makeUnsafe(row.created_at)
})

export class Orgs extends Context.Service<Orgs, {
  /** Creates an org (audit `org.created`); joins the caller's transaction if there is one. */
  readonly create: (name: string, context: AuditContext) => Effect.Effect<OrgRecord, Rows.QueryError>
  readonly get: (orgId: OrgId) => Effect.Effect<OrgRecord, NotFound | Rows.QueryError>
  /** Renames (audit `org.updated`, same transaction); cached principals of the org are dropped everywhere. */
  readonly rename: (
    orgId: OrgId,
    name: string,
    context: AuditContext
  ) => Effect.Effect<OrgRecord, NotFound | Rows.QueryError>
}>()("@svc/auth/Orgs") {
  static readonly layer = Layer.effect(
    Orgs,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const audit = yield* Audit
      const cache = yield* CredentialCache
      const created = Rows.decoder("Orgs.create", OrgRow)
      const renamed = Rows.decoder("Orgs.rename", OrgRow)
      const findOrg = Rows.findOneOption("Orgs.get", {
        Request: Schema.String,
        Result: OrgRow,
        execute: (orgId) => sql`SELECT id, name, created_at FROM orgs WHERE id = ${orgId}`
      })

      const create = Effect.fn("Orgs.create")(function*(name: string, context: AuditContext) {
        const now = yield* Clock.currentTimeMillis
        const id = makeId("org", now) as OrgId
        return yield* sql.withTransaction(Effect.gen(function*() {
          const rows = yield* created(sql`
            INSERT INTO orgs (id, name, created_at) VALUES (${id}, ${name}, ${formatTimestamp(now)})
            RETURNING id, name, created_at
          `)
          yield* audit.record(id, "org.created", id, context)
          return toOrgRecord(rows[0]!)
        }))
      })

      const get = Effect.fn("Orgs.get")(function*(orgId: OrgId) {
        const org = yield* findOrg(orgId)
        if (Option.isNone(org)) return yield* new NotFound({ error: "Org not found" })
        return toOrgRecord(org.value)
      })

      const rename = Effect.fn("Orgs.rename")(function*(orgId: OrgId, name: string, context: AuditContext) {
        const org = yield* sql.withTransaction(Effect.gen(function*() {
          const rows = yield* renamed(sql`
            UPDATE orgs SET name = ${name} WHERE id = ${orgId} RETURNING id, name, created_at
          `)
          if (rows.length === 0) return yield* new NotFound({ error: "Org not found" })
          yield* audit.record(orgId, "org.updated", orgId, context)
          return toOrgRecord(rows[0]!)
        }))
        yield* cache.orgChanged(orgId)
        return org
      })

      return Orgs.of({ create, get, rename })
    })
  )
}
