/**
 * `svc org create <name>`: an operator creates an org and gets its bootstrap key (full access,
 * userless: a service key), shown once. Against DATABASE_URL; no API process needed.
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
).pipe(Command.withDescription("Create an org and print its bootstrap full-access service key"))

export const org = Command.make("org").pipe(
  Command.withDescription("Operator commands for orgs"),
  Command.withSubcommands([orgCreate])
)
