/**
 * Users and their passwords: sign-up creates an org and its first user; sign-in checks a
 * password. Emails are normalised (trimmed, lowercased) and unique on the platform. A wrong
 * email and a wrong password fail the same way and take the same time (an unknown email is
 * checked against a dummy hash), and both count towards the email's backoff (`SignInThrottle`).
 */
import * as Rows from "@svc/db/Rows"
import { normalizeEmail, type OrgRecord, type User } from "@svc/domain/Api/Auth"
import { Conflict, RateLimited, Unauthenticated } from "@svc/domain/Errors"
import { makeId, OrgId, UserId } from "@svc/domain/Ids"
import { formatTimestamp } from "@svc/domain/Time"
import { Clock, Context, DateTime, Effect, Layer, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Audit, type AuditContext } from "./Audit.ts"
import * as Passwords from "./Auth/Passwords.ts"
import * as Throttle from "./Auth/SignInThrottle.ts"

export interface SignedUpUser {
  readonly user: User
  readonly org: OrgRecord
}

/** A user with its org, as signing in reads them. */
const UserRow = Schema.Struct({
  id: UserId,
  email: Schema.String,
  password_hash: Schema.String,
  created_at: Rows.Timestamptz,
  org_id: OrgId,
  org_name: Schema.String,
  org_created_at: Rows.Timestamptz
})

const badCredentials = new Unauthenticated({ error: "Wrong email or password" })

export class Users extends Context.Service<Users, {
  /** Org + first user (audit `org.created`, `auth.signed_up`), in one transaction. */
  readonly signUp: (
    input: { readonly email: string; readonly password: string; readonly orgName: string },
    context: Omit<AuditContext, "actor">
  ) => Effect.Effect<SignedUpUser, Conflict | Rows.QueryError>
  /**
   * The user of an email and password, or `unauthenticated` (audit `auth.sign_in_failed` for a
   * known email, bounded: see `SignInThrottle`), or `rate_limited` while the email is in its
   * backoff. A hash at older parameters is rewritten at the current ones.
   */
  readonly signIn: (
    input: { readonly email: string; readonly password: string },
    context: Omit<AuditContext, "actor">
  ) => Effect.Effect<SignedUpUser, Unauthenticated | RateLimited | Rows.QueryError>
}>()("@svc/auth/Users") {
  static readonly layer = Layer.effect(
    Users,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const audit = yield* Audit
      const findUser = Rows.findOneOption("Users.signIn", {
        Request: Schema.String,
        Result: UserRow,
        execute: (email) =>
          sql`
            SELECT u.id, u.email, u.password_hash, u.created_at, o.id AS org_id, o.name AS org_name,
                   o.created_at AS org_created_at
            FROM users u JOIN orgs o ON o.id = u.org_id WHERE u.email = ${email}
          `
      })

      const signUp = Effect.fn("Users.signUp")(function*(
        input: { readonly email: string; readonly password: string; readonly orgName: string },
        context: Omit<AuditContext, "actor">
      ) {
        const email = normalizeEmail(input.email)
        // Hash before the transaction: it takes tens of milliseconds and holds no lock.
        const passwordHash = yield* Passwords.hash(input.password)
        const now = yield* Clock.currentTimeMillis
        const orgId = makeId("org", now) as OrgId
        const userId = makeId("user", now) as UserId
        const at = formatTimestamp(now)
        const actor = { ...context, actor: { type: "user" as const, id: userId } }
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO orgs (id, name, created_at) VALUES (${orgId}, ${input.orgName}, ${at})`
          const inserted = yield* sql`
            INSERT INTO users (id, org_id, email, password_hash, created_at)
            VALUES (${userId}, ${orgId}, ${email}, ${passwordHash}, ${at})
            ON CONFLICT (email) DO NOTHING RETURNING id
          `
          // Rolls the org back with it.
          if (inserted.length === 0) return yield* new Conflict({ error: "An account with this email already exists" })
          yield* audit.record(orgId, "org.created", orgId, actor)
          yield* audit.record(orgId, "auth.signed_up", userId, actor)
        }))
        const createdAt = DateTime.makeUnsafe(now)
        return {
          user: { id: userId, email, createdAt },
          org: { id: orgId, name: input.orgName, createdAt }
        }
      })

      const signIn = Effect.fn("Users.signIn")(function*(
        input: { readonly email: string; readonly password: string },
        context: Omit<AuditContext, "actor">
      ) {
        const email = normalizeEmail(input.email)
        const key = Throttle.emailKey(email)
        const now = yield* Clock.currentTimeMillis
        const until = yield* Throttle.blockedUntil(sql, key, now)
        if (until !== undefined) {
          return yield* new RateLimited({
            error: "Too many failed sign-ins for this account; retry later",
            retry_after_s: Math.max(1, Math.ceil((until - now) / 1000))
          })
        }
        const row = Option.getOrUndefined(yield* findUser(email))
        const ok = yield* Passwords.verify(input.password, row?.password_hash ?? Passwords.DUMMY_HASH)
        if (row === undefined || !ok) {
          const failures = yield* Throttle.recordFailure(sql, key, now)
          if (row !== undefined && Throttle.audited(failures)) {
            yield* audit.record(row.org_id, "auth.sign_in_failed", row.id, {
              ...context,
              actor: { type: "anonymous", id: null }
            })
          }
          return yield* badCredentials
        }
        yield* Throttle.reset(sql, key)
        if (Passwords.needsRehash(row.password_hash)) {
          // Stored at older parameters: the password is at hand only now. Compare-and-set, so a
          // password changed meanwhile is not overwritten.
          const upgraded = yield* Passwords.hash(input.password)
          yield* sql`
            UPDATE users SET password_hash = ${upgraded} WHERE id = ${row.id} AND password_hash = ${row.password_hash}`
        }
        return {
          user: { id: row.id, email: row.email, createdAt: DateTime.makeUnsafe(row.created_at) },
          org: { id: row.org_id, name: row.org_name, createdAt: DateTime.makeUnsafe(row.org_created_at) }
        }
      })

      return Users.of({ signUp, signIn })
    })
  )
}
