/**
 * What `svc org create` and `svc key create` do, against DATABASE_URL (no API process needed):
 * the identity services of `@svc/auth` on the database. Loaded only when one of them runs
 * (`Commands/Operator.ts` defines them).
 */
import { ApiKeys } from "@svc/auth/ApiKeys"
import { operatorContext } from "@svc/auth/Audit"
import * as AuthLayer from "@svc/auth/AuthLayer"
import { Orgs } from "@svc/auth/Orgs"
import * as Database from "@svc/db/Database"
import type { OrgId } from "@svc/domain/Ids"
import { Console, type DateTime, Effect, Layer, Option } from "effect"
import { SqlClient } from "effect/sql"

/** The identity services on DATABASE_URL, for operator commands. */
export const OperatorServices = AuthLayer.operatorLayer.pipe(Layer.provideMerge(Database.layer))

/** A new org and its bootstrap key (full access, userless: a service key), shown once. */
export const createOrg = Effect.fn("Cli.orgCreate")(function*(o: { readonly name: string; readonly json: boolean }) {
  const orgs = yield* Orgs
  const keys = yield* ApiKeys
  const sql = yield* SqlClient.SqlClient
  // Both or neither: an org without its bootstrap key would be unreachable.
  const { org, key } = yield* sql.withTransaction(Effect.gen(function*() {
    const org = yield* orgs.create(o.name, operatorContext)
    const key = yield* keys.mint({ orgId: org.id, userId: null, name: "bootstrap" }, operatorContext)
    return { org, key }
  }))
  if (o.json) {
    yield* Console.log(JSON.stringify({ org_id: org.id, key_id: key.id, api_key: key.token }))
  } else {
    yield* Console.log(`org_id   ${org.id}`)
    yield* Console.log(`key_id   ${key.id}`)
    yield* Console.log(`api_key  ${key.token}`)
    yield* Console.error("The key has full access and is shown only now: store it safely.")
  }
}, Effect.provide(OperatorServices))

/** A userless service key for an org (scopes default to `*`), shown once. */
export const createKey = Effect.fn("Cli.keyCreate")(function*(o: {
  readonly org: OrgId
  readonly name: string
  readonly scopes: ReadonlyArray<string>
  readonly expiresAt: Option.Option<DateTime.Utc>
  readonly json: boolean
}) {
  const orgs = yield* Orgs
  const keys = yield* ApiKeys
  yield* orgs.get(o.org)
  const key = yield* keys.mint({
    orgId: o.org,
    userId: null,
    name: o.name,
    scopes: o.scopes.length === 0 ? undefined : o.scopes,
    expiresAt: Option.getOrNull(o.expiresAt)
  }, operatorContext)
  if (o.json) {
    yield* Console.log(JSON.stringify({ key_id: key.id, api_key: key.token, scopes: key.scopes }))
  } else {
    yield* Console.log(`key_id   ${key.id}`)
    yield* Console.log(`scopes   ${key.scopes.join(" ")}`)
    yield* Console.log(`api_key  ${key.token}`)
    yield* Console.error("The key is shown only now: store it safely.")
  }
}, Effect.provide(OperatorServices))
