/**
 * `svc key create --org <id> --name <n> [--scope <s>]... [--expires-at <ISO>]`: an operator
 * mints a userless service key for an org (scopes default to `*`) and gets its token, shown
 * once. Against DATABASE_URL; no API process needed.
 */
import { ApiKeys } from "@svc/auth/ApiKeys"
import { operatorContext } from "@svc/auth/Audit"
import { Orgs } from "@svc/auth/Orgs"
import { OrgId } from "@svc/domain/Ids"
import { Name } from "@svc/domain/Text"
import { Timestamp } from "@svc/domain/Time"
import { Console, Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import { OperatorServices } from "./Orgs.ts"

export const keyCreate = Command.make(
  "create",
  {
    org: Flag.String("org").pipe(Flag.withDescription("The org id (org_...)"), Flag.withSchema(OrgId)),
    name: Flag.String("name").pipe(
      Flag.withDescription("The key's name (1 to 120 characters)"),
      Flag.withSchema(Name(120))
    ),
    scopes: Flag.String("scope").pipe(
      Flag.withDescription("A scope token (repeatable): *, sandboxes:read, secrets:use, sandbox:<id>, ... (default *)"),
      Flag.atLeast(0)
    ),
    expiresAt: Flag.String("expires-at").pipe(
      Flag.withDescription("ISO 8601 expiry, in the future (default: never)"),
      Flag.withSchema(Timestamp),
      Flag.optional
    ),
    json: Flag.Boolean("json").pipe(Flag.withDescription("Print {key_id, api_key} as JSON"), Flag.withDefault(false))
  },
  Effect.fn(function*({ org, name, scopes, expiresAt, json }) {
    const orgs = yield* Orgs
    const keys = yield* ApiKeys
    yield* orgs.get(org)
    const key = yield* keys.mint({
      orgId: org,
      userId: null,
      name,
      scopes: scopes.length === 0 ? undefined : scopes,
      expiresAt: Option.getOrNull(expiresAt)
    }, operatorContext)
    if (json) {
      yield* Console.log(JSON.stringify({ key_id: key.id, api_key: key.token, scopes: key.scopes }))
    } else {
      yield* Console.log(`key_id   ${key.id}`)
      yield* Console.log(`scopes   ${key.scopes.join(" ")}`)
      yield* Console.log(`api_key  ${key.token}`)
      yield* Console.error("The key is shown only now: store it safely.")
    }
  }, Effect.provide(OperatorServices))
).pipe(Command.withDescription("Mint a service key for an org and print its token"))

export const key = Command.make("key").pipe(
  Command.withDescription("Operator commands for API keys"),
  Command.withSubcommands([keyCreate])
)
