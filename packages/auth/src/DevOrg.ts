/**
 * The development org of `svc dev`: created with a full-access userless service key on the
 * first start, reused afterwards. Idempotent: given the credentials written last time, it mints
 * nothing while that key still works; when the key was revoked (or the file lost) it mints a new
 * key for the same dev org; only when there is no dev org does it create one.
 */
import * as Rows from "@svc/db/Rows"
import { Unauthenticated } from "@svc/domain/Errors"
import { OrgId } from "@svc/domain/Ids"
import { Effect, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { ApiKeys } from "./ApiKeys.ts"
import { operatorContext } from "./Audit.ts"
import { Orgs } from "./Orgs.ts"

export const DEV_ORG_NAME = "dev"

export interface DevCredentials {
  readonly org_id: string
  readonly api_key: string
}

const orgIds = Rows.decoder("ensureDevOrg", Schema.Struct({ id: OrgId }))

/**
 * `{org_id, api_key, key_id}` of the dev org, and whether anything was minted. Pass what
 * `.svc/dev-credentials.json` held (or nothing). Needs `ApiKeys`, `Orgs` and `SqlClient` (e.g.
 * `AuthLayer.operatorLayer` with the database).
 */
export const ensureDevOrg = Effect.fn("ensureDevOrg")(function*(existing?: Partial<DevCredentials> | null) {
  const keys = yield* ApiKeys
  const orgs = yield* Orgs
  const sql = yield* SqlClient.SqlClient

  if (typeof existing?.api_key === "string" && typeof existing.org_id === "string") {
    const principal = yield* keys.verify(existing.api_key).pipe(
      Effect.map(Option.some),
      Effect.catchIf((e): e is Unauthenticated => e instanceof Unauthenticated, () => Effect.succeed(Option.none()))
    )
    if (Option.isSome(principal) && principal.value.orgId === existing.org_id && principal.value.grant.full) {
      return {
        org_id: existing.org_id,
        api_key: existing.api_key,
        key_id: principal.value.credential.id,
        minted: false
      }
    }
  }

  const known = typeof existing?.org_id === "string"
    ? yield* orgIds(sql`SELECT id FROM orgs WHERE id = ${existing.org_id}`)
    : []
  const named = known.length > 0
    ? known
    : yield* orgIds(sql`SELECT id FROM orgs WHERE name = ${DEV_ORG_NAME} ORDER BY created_at, id LIMIT 1`)
  return yield* sql.withTransaction(Effect.gen(function*() {
    const orgId = named.length > 0 ? named[0]!.id : (yield* orgs.create(DEV_ORG_NAME, operatorContext)).id
    const key = yield* keys.mint({ orgId, userId: null, name: "svc dev" }, operatorContext)
    return { org_id: orgId as string, api_key: key.token as string, key_id: key.id as string, minted: true }
  }))
})
