/**
 * The org.
 *
 * For users, over the API (a full-access key): `svc org get`, `svc org rename <name>`.
 *
 * For operators, against DATABASE_URL (no API process needed): `svc org create <name>` creates
 * an org and prints its bootstrap key (full access, userless: a service key), shown once.
 */
import { ApiKeys } from "@svc/auth/ApiKeys"
import { operatorContext } from "@svc/auth/Audit"
import * as AuthLayer from "@svc/auth/AuthLayer"
import { Orgs } from "@svc/auth/Orgs"
import * as Database from "@svc/db/Database"
import { Name } from "@svc/domain/Text"
import { Console, Effect, Layer } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { SqlClient } from "effect/sql"
import { call } from "../Client.ts"

/** The identity services on DATABASE_URL, for operator commands. */
export const OperatorServices = AuthLayer.operatorLayer.pipe(Layer.provideMerge(Database.layer))

export const orgCreate = Command.make(
  "create",
  {
    name: Argument.String("name").pipe(
      Argument.withDescription("The org's name (1 to 120 characters)"),
      Argument.withSchema(Name(120))
    ),
    json: Flag.Boolean("json").pipe(
      Flag.withDescription("Print {org_id, key_id, api_key} as JSON"),
      Flag.withDefault(false)
    )
  },
  Effect.fn(function*({ name, json }) {
    const orgs = yield* Orgs
    const keys = yield* ApiKeys
    const sql = yield* SqlClient.SqlClient
    // Both or neither: an org without its bootstrap key would be unreachable.
    const { org, key } = yield* sql.withTransaction(Effect.gen(function*() {
      const org = yield* orgs.create(name, operatorContext)
      const key = yield* keys.mint({ orgId: org.id, userId: null, name: "bootstrap" }, operatorContext)
      return { org, key }
    }))
    if (json) {
      yield* Console.log(JSON.stringify({ org_id: org.id, key_id: key.id, api_key: key.token }))
    } else {
      yield* Console.log(`org_id   ${org.id}`)
      yield* Console.log(`key_id   ${key.id}`)
      yield* Console.log(`api_key  ${key.token}`)
      yield* Console.error("The key has full access and is shown only now: store it safely.")
    }
  }, Effect.provide(OperatorServices))
).pipe(
  Command.withDescription("Operator: create an org against DATABASE_URL; prints its bootstrap full-access key")
)

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))

const orgGet = Command.make(
  "get",
  { json },
  Effect.fn(function*(o) {
    const record = yield* call((svc) => svc.org.get())
    if (o.json) return yield* print(record)
    yield* Console.log(`${record.id}  ${record.name}  created ${record.createdAt}`)
  })
).pipe(Command.withDescription("Show the key's org"))

const orgRename = Command.make(
  "rename",
  {
    name: Argument.String("name").pipe(Argument.withDescription("The org's new name (1 to 120 characters)")),
    json
  },
  Effect.fn(function*(o) {
    const record = yield* call((svc) => svc.org.update({ name: o.name }))
    if (o.json) return yield* print(record)
    yield* Console.log(`${record.id}  ${record.name}`)
  })
).pipe(Command.withDescription("Rename the key's org"))

export const org = Command.make("org").pipe(
  Command.withDescription("The org: get, rename (over the API); create (operator, DATABASE_URL)"),
  Command.withSubcommands([orgGet, orgRename, orgCreate])
)
