/**
 * Dashboard sessions: server-side rows with an absolute expiry, identified to the browser by a
 * random token in the `client.session_token` cookie (HttpOnly, SameSite=Lax, Secure unless the
 * server is on loopback). Only the token's SHA-256 is stored. Sessions are unscoped (full
 * access) and are checked against Postgres on every request, so sign-out is immediate on
 * every process.
 */
import * as Rows from "@svc/db/Rows"
import type { Principal } from "@svc/domain/Api/Auth"
import { Unauthenticated } from "@svc/domain/Errors"
import { makeBody, OrgId, UserId } from "@svc/domain/Ids"
import { FULL_ACCESS } from "@svc/domain/Scopes"
import { formatTimestamp } from "@svc/domain/Time"
import { Clock, Context, DateTime, Duration, Effect, Layer, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { createHash, randomBytes } from "node:crypto"
import { Audit, type AuditContext } from "./Audit.ts"
import { AuthConfig } from "./Config.ts"

/** 32 random bytes, base64url: 43 characters. */
const TOKEN = /^[A-Za-z0-9_-]{43}$/

const hashToken = (token: string) => createHash("sha256").update(token, "utf8").digest("hex")

export interface NewSession {
  readonly id: string
  /** The cookie value; secret. */
  readonly token: string
  readonly expiresAt: DateTime.Utc
}

/** A live session with its user and org, as verifying its token reads them. */
const SessionRow = Schema.Struct({
  id: Schema.String,
  org_id: OrgId,
  org_name: Schema.String,
  user_id: UserId,
  email: Schema.String,
  expires_at: Rows.Timestamptz
})

const unauthenticated = new Unauthenticated()

export class Sessions extends Context.Service<Sessions, {
  /** Starts a session for a user (audit `auth.signed_in`, same transaction). */
  readonly create: (
    user: { readonly id: UserId; readonly orgId: OrgId },
    context: AuditContext
  ) => Effect.Effect<NewSession, Rows.QueryError>
  readonly verify: (token: string) => Effect.Effect<Principal, Unauthenticated | Rows.QueryError>
  /** Ends a session (audit `auth.signed_out`); ending an ended one does nothing. */
  readonly end: (orgId: OrgId, sessionId: string, context: AuditContext) => Effect.Effect<void, Rows.QueryError>
}>()("@svc/auth/Sessions") {
  static readonly layer = Layer.effect(
    Sessions,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const audit = yield* Audit
      const config = yield* AuthConfig
      const findSession = Rows.findOneOption("Sessions.verify", {
        Request: Schema.String,
        Result: SessionRow,
        execute: (tokenHash) =>
          sql`
            SELECT s.id, s.org_id, o.name AS org_name, s.user_id, u.email, s.expires_at
            FROM sessions s JOIN users u ON u.id = s.user_id JOIN orgs o ON o.id = s.org_id
            WHERE s.token_hash = ${tokenHash} AND s.ended_at IS NULL
          `
      })

      const create = Effect.fn("Sessions.create")(function*(
        user: { readonly id: UserId; readonly orgId: OrgId },
        context: AuditContext
      ) {
        const now = yield* Clock.currentTimeMillis
        const id = `ses_${makeBody(now)}`
        const token = randomBytes(32).toString("base64url")
        const expiresAtMs = now + Duration.toMillis(config.sessionTtl)
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`
            INSERT INTO sessions (id, token_hash, user_id, org_id, created_at, expires_at)
            VALUES (${id}, ${hashToken(token)}, ${user.id}, ${user.orgId}, ${formatTimestamp(now)},
                    ${formatTimestamp(expiresAtMs)})
          `
          yield* audit.record(user.orgId, "auth.signed_in", user.id, context)
        }))
        return { id, token, expiresAt: DateTime.makeUnsafe(expiresAtMs) }
      })

      const verify = Effect.fnUntraced(function*(token: string) {
        if (!TOKEN.test(token)) return yield* unauthenticated
        const now = yield* Clock.currentTimeMillis
        const row = Option.getOrUndefined(yield* findSession(hashToken(token)))
        if (row === undefined || row.expires_at.getTime() <= now) return yield* unauthenticated
        const principal: Principal = {
          orgId: row.org_id,
          org: { id: row.org_id, name: row.org_name },
          user: { id: row.user_id, email: row.email },
          credential: {
            type: "session",
            id: row.id,
            scopes: FULL_ACCESS.tokens,
            expiresAt: DateTime.makeUnsafe(row.expires_at)
          },
          grant: FULL_ACCESS
        }
        return principal
      })

      const end = Effect.fn("Sessions.end")(function*(orgId: OrgId, sessionId: string, context: AuditContext) {
        const now = yield* Clock.currentTimeMillis
        yield* sql.withTransaction(Effect.gen(function*() {
          const rows = yield* sql`
            UPDATE sessions SET ended_at = ${formatTimestamp(now)}
            WHERE id = ${sessionId} AND org_id = ${orgId} AND ended_at IS NULL RETURNING id
          `
          if (rows.length > 0) yield* audit.record(orgId, "auth.signed_out", sessionId, context)
        }))
      })

      return Sessions.of({ create, verify, end })
    })
  )
}
