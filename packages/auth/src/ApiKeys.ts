/**
 * API keys (docs/contract.md#api-keys): mint, list, revoke, verify.
 *
 * - The token (`svc_live_` + 32 random base62 + 6 checksum characters, see
 *   `@svc/domain/ApiKeyToken`) is returned by `mint` once; only its SHA-256 is stored.
 * - A key minted by a session or by a user's key belongs to that user (`userId`); a key minted
 *   by the operator CLI, or by a userless key, is a userless service key.
 * - Verification checks the form and checksum first (no database for noise), then the cache of
 *   verified keys, then the cache of refused ones, then Postgres; revoked and expired keys are
 *   `unauthenticated`. A refusal is cached (by token hash, `SVC_KEY_CACHE_TTL`, at most 10,000):
 *   an unknown, revoked or expired key never becomes valid, so a client repeating a bad key
 *   costs one lookup per cache lifetime. (Many different unknown keys are the per-address
 *   limit's job, `RateLimit.ts`.)
 * - Mint and revoke write their audit entries (`apikey.created`, `apikey.revoked`) in their own
 *   transaction. A revocation returns only after every live API process dropped the key (see
 *   `CredentialCache`).
 */
import * as Rows from "@svc/db/Rows"
import type { ApiKeyPage, ApiKeyRow, CreatedApiKey, Principal } from "@svc/domain/Api/Auth"
import * as Token from "@svc/domain/ApiKeyToken"
import { InvalidRequest, type InvalidScope, NotFound, Unauthenticated } from "@svc/domain/Errors"
import { ApiKeyId, makeId, OrgId, UserId } from "@svc/domain/Ids"
import { type ListQuery, pageInfo } from "@svc/domain/Pagination"
import * as Scopes from "@svc/domain/Scopes"
import { formatTimestamp } from "@svc/domain/Time"
import { Clock, Context, DateTime, Duration, Effect, Layer, Option, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Audit, type AuditContext } from "./Audit.ts"
import { CredentialCache } from "./Auth/CredentialCache.ts"
import { LastUsed } from "./Auth/LastUsed.ts"
import { AuthConfig } from "./Config.ts"

export interface MintInput {
  readonly orgId: OrgId
  /** The owning user; null for a userless service key. */
  readonly userId: UserId | null
  readonly name: string
  /** Scope tokens; omitted: `["*"]`. */
  readonly scopes?: ReadonlyArray<string> | undefined
  /** Omitted or null: never expires. Must be in the future. */
  readonly expiresAt?: DateTime.Utc | null | undefined
}

/** A row of `api_keys` (`ROW_COLUMNS`). */
const KeyRow = Schema.Struct({
  id: ApiKeyId,
  prefix: Schema.String,
  name: Schema.String,
  scopes: Schema.Array(Schema.String),
  created_at: Rows.Timestamptz,
  last_used_at: Schema.NullOr(Rows.Timestamptz),
  expires_at: Schema.NullOr(Rows.Timestamptz),
  revoked_at: Schema.NullOr(Rows.Timestamptz)
})

const ROW_COLUMNS = "id, prefix, name, scopes, created_at, last_used_at, expires_at, revoked_at"

const utc = (d: Date | null) => (d === null ? null : DateTime.makeUnsafe(d))

const toRow = (row: typeof KeyRow.Type): ApiKeyRow => ({
  id: row.id,
  prefix: row.prefix,
  name: row.name,
  scopes: row.scopes,
  createdAt: DateTime.makeUnsafe(row.created_at),
  lastUsedAt: utc(row.last_used_at),
  expiresAt: utc(row.expires_at),
  revokedAt: utc(row.revoked_at)
})

const Total = Schema.Struct({ total: Rows.Int8 })

/** What verifying a token reads: the key, its org and its user. */
const VerifyRow = Schema.Struct({
  id: Schema.String,
  org_id: OrgId,
  org_name: Schema.String,
  user_id: Schema.NullOr(UserId),
  email: Schema.NullOr(Schema.String),
  scopes: Schema.Array(Schema.String),
  token_hash: Schema.String,
  expires_at: Schema.NullOr(Rows.Timestamptz),
  revoked_at: Schema.NullOr(Rows.Timestamptz)
})

const unauthenticated = new Unauthenticated()

const MAX_REFUSED = 10_000

export class ApiKeys extends Context.Service<ApiKeys, {
  readonly mint: (
    input: MintInput,
    context: AuditContext
  ) => Effect.Effect<CreatedApiKey, InvalidScope | InvalidRequest | Rows.QueryError>
  readonly list: (orgId: OrgId, query: ListQuery) => Effect.Effect<ApiKeyPage, Rows.QueryError>
  readonly get: (orgId: OrgId, keyId: ApiKeyId) => Effect.Effect<ApiKeyRow, NotFound | Rows.QueryError>
  /** Revokes (idempotent: a revoked key's row comes back unchanged, with no new audit entry). */
  readonly revoke: (
    orgId: OrgId,
    keyId: ApiKeyId,
    context: AuditContext
  ) => Effect.Effect<ApiKeyRow, NotFound | Rows.QueryError>
  /**
   * The principal of a token this process verified recently and that is still valid at
   * `nowMs`, else undefined (then call `verify`). Synchronous: the hot path of every request.
   */
  readonly cached: (token: string, nowMs: number) => Principal | undefined
  /** The principal of a presented token, or `unauthenticated`. Never logs or echoes the token. */
  readonly verify: (token: string) => Effect.Effect<Principal, Unauthenticated | Rows.QueryError>
}>()("@svc/auth/ApiKeys") {
  static readonly layer = Layer.effect(
    ApiKeys,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const audit = yield* Audit
      const cache = yield* CredentialCache
      const lastUsed = yield* LastUsed
      const config = yield* AuthConfig
      const refusedTtlMs = Duration.toMillis(config.keyCacheTtl)

      const inserted = Rows.decoder("ApiKeys.mint", KeyRow)
      const revokedRows = Rows.decoder("ApiKeys.revoke", KeyRow)
      const page = Rows.findAll("ApiKeys.list", {
        Request: Schema.Struct({ orgId: Schema.String, limit: Schema.Number, offset: Schema.Number }),
        Result: KeyRow,
        execute: ({ limit, offset, orgId }) =>
          sql`
            SELECT ${sql.unsafe(ROW_COLUMNS)} FROM api_keys WHERE org_id = ${orgId}
            ORDER BY created_at DESC, id DESC LIMIT ${limit} OFFSET ${offset}
          `
      })
      const total = Rows.findOneOption("ApiKeys.total", {
        Request: Schema.String,
        Result: Total,
        execute: (orgId) => sql`SELECT count(*) AS total FROM api_keys WHERE org_id = ${orgId}`
      })
      const findKey = Rows.findOneOption("ApiKeys.get", {
        Request: Schema.Struct({ orgId: Schema.String, keyId: Schema.String }),
        Result: KeyRow,
        execute: ({ keyId, orgId }) =>
          sql`
            SELECT ${sql.unsafe(ROW_COLUMNS)} FROM api_keys WHERE id = ${keyId} AND org_id = ${orgId}
          `
      })
      const findToken = Rows.findOneOption("ApiKeys.verify", {
        Request: Schema.String,
        Result: VerifyRow,
        execute: (tokenHash) =>
          sql`
            SELECT k.id, k.org_id, o.name AS org_name, k.user_id, u.email, k.scopes, k.token_hash,
                   k.expires_at, k.revoked_at
            FROM api_keys k JOIN orgs o ON o.id = k.org_id LEFT JOIN users u ON u.id = k.user_id
            WHERE k.token_hash = ${tokenHash}
          `
      })

      /** Token hashes Postgres refused, until when (ms). Oldest insertion evicted first. */
      const refused = new Map<string, number>()
      const isRefused = (tokenHash: string, nowMs: number) => {
        const until = refused.get(tokenHash)
        if (until === undefined) return false
        if (nowMs < until) return true
        refused.delete(tokenHash)
        return false
      }
      const refuse = (tokenHash: string, nowMs: number) => {
        if (refused.size >= MAX_REFUSED) {
          const oldest = refused.keys().next()
          if (!oldest.done) refused.delete(oldest.value)
        }
        refused.set(tokenHash, nowMs + refusedTtlMs)
        return unauthenticated
      }

      const mint = Effect.fn("ApiKeys.mint")(function*(input: MintInput, context: AuditContext) {
        const grant = Scopes.parseScopes(input.scopes ?? Scopes.DEFAULT_SCOPES)
        if (Result.isFailure(grant)) return yield* grant.failure
        const now = yield* Clock.currentTimeMillis
        const expiresAt = input.expiresAt ?? null
        if (expiresAt !== null && DateTime.toEpochMillis(expiresAt) <= now) {
          return yield* new InvalidRequest({
            error: "expires_at must be in the future",
            issues: [{ path: "expires_at", message: "must be in the future" }]
          })
        }
        const id = makeId("apiKey", now)
        const minted = Token.mint()
        const scopes = [...grant.success.tokens]
        const rows = yield* sql.withTransaction(Effect.gen(function*() {
          const rows = yield* inserted(sql`
            INSERT INTO api_keys (id, org_id, user_id, name, prefix, token_hash, scopes, created_at, expires_at)
            VALUES (${id}, ${input.orgId}, ${input.userId}, ${input.name}, ${minted.prefix}, ${minted.hash},
                    ${scopes}::text[], ${formatTimestamp(now)},
                    ${expiresAt === null ? null : formatTimestamp(expiresAt)}::timestamptz)
            RETURNING ${sql.unsafe(ROW_COLUMNS)}
          `)
          yield* audit.record(input.orgId, "apikey.created", id, context)
          return rows
        }))
        return { ...toRow(rows[0]!), token: minted.token }
      })

      const list = Effect.fn("ApiKeys.list")(function*(orgId: OrgId, query: ListQuery) {
        const [rows, counted] = yield* Effect.all([
          page({ orgId, limit: query.limit, offset: query.offset }),
          total(orgId)
        ], { concurrency: 2 })
        const n = Option.match(counted, { onNone: () => 0, onSome: (c) => Number(c.total) })
        return { keys: rows.map(toRow), ...pageInfo(query, rows.length, n) }
      })

      const get = Effect.fn("ApiKeys.get")(function*(orgId: OrgId, keyId: ApiKeyId) {
        const key = yield* findKey({ orgId, keyId })
        if (Option.isNone(key)) return yield* new NotFound({ error: "API key not found" })
        return toRow(key.value)
      })

      const revoke = Effect.fn("ApiKeys.revoke")(function*(orgId: OrgId, keyId: ApiKeyId, context: AuditContext) {
        const now = yield* Clock.currentTimeMillis
        const revoked = yield* sql.withTransaction(Effect.gen(function*() {
          const rows = yield* revokedRows(sql`
            UPDATE api_keys SET revoked_at = ${formatTimestamp(now)}
            WHERE id = ${keyId} AND org_id = ${orgId} AND revoked_at IS NULL
            RETURNING ${sql.unsafe(ROW_COLUMNS)}
          `)
          if (rows.length === 0) return null
          yield* audit.record(orgId, "apikey.revoked", keyId, context)
          return toRow(rows[0]!)
        }))
        if (revoked === null) return yield* get(orgId, keyId)
        yield* cache.revoked(keyId)
        return revoked
      })

      const cached = (token: string, nowMs: number): Principal | undefined => {
        if (!Token.isWellFormed(token)) return undefined
        const entry = cache.get(Token.hash(token), nowMs)
        if (entry === undefined || (entry.expiresAtMs !== null && entry.expiresAtMs <= nowMs)) return undefined
        lastUsed.touch(entry.principal.credential.id, nowMs)
        return entry.principal
      }

      const verify = Effect.fnUntraced(function*(token: string) {
        if (!Token.isWellFormed(token)) return yield* unauthenticated
        const tokenHash = Token.hash(token)
        const now = yield* Clock.currentTimeMillis
        const cached = cache.get(tokenHash, now)
        if (cached !== undefined) {
          if (cached.expiresAtMs !== null && cached.expiresAtMs <= now) return yield* unauthenticated
          lastUsed.touch(cached.principal.credential.id, now)
          return cached.principal
        }
        if (isRefused(tokenHash, now)) return yield* unauthenticated
        const epoch = cache.epoch()
        const row = Option.getOrUndefined(yield* findToken(tokenHash))
        if (row === undefined || !Token.hashesEqual(row.token_hash, tokenHash) || row.revoked_at !== null) {
          return yield* refuse(tokenHash, now)
        }
        const expiresAtMs = row.expires_at === null ? null : row.expires_at.getTime()
        if (expiresAtMs !== null && expiresAtMs <= now) return yield* refuse(tokenHash, now)
        const grant = Scopes.parseScopes(row.scopes)
        if (Result.isFailure(grant)) {
          // Valid at mint; only a grammar change can get here. Refuse rather than guess.
          yield* Effect.logError("stored key scopes no longer parse", { keyId: row.id })
          return yield* refuse(tokenHash, now)
        }
        const principal: Principal = {
          orgId: row.org_id,
          org: { id: row.org_id, name: row.org_name },
          user: row.user_id === null ? null : { id: row.user_id, email: row.email ?? "" },
          credential: {
            type: "api_key",
            id: row.id,
            scopes: grant.success.tokens,
            expiresAt: row.expires_at === null ? null : DateTime.makeUnsafe(row.expires_at)
          },
          grant: grant.success
        }
        cache.set(tokenHash, { principal, expiresAtMs, cachedAtMs: now }, epoch)
        lastUsed.touch(row.id, now)
        return principal
      })

      return ApiKeys.of({ mint, list, get, revoke, cached, verify })
    })
  )
}
