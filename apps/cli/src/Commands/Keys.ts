/**
 * API keys.
 *
 * For users, over the API (a full-access key; the new key belongs to the key's user, if any):
 *
 *   svc key list [--json]                     # revoked keys included
 *   svc key mint --name ci --scope sandboxes:write --expires-at 2027-01-01T00:00:00.000Z
 *   svc key revoke key_...
 *
 * The repository's `svc` adds the operator's `svc key create --org <id> --name <n> [--scope
 * <s>]... [--expires-at <ISO>]` (`Operator.ts`): a userless service key for an org, against
 * DATABASE_URL (scopes default to `*`). Either way the token is shown once.
 */
import type { ApiKey } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { call } from "../Client.ts"

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))
const scopeFlag = Flag.String("scope").pipe(
  Flag.withDescription("A scope token (repeatable): *, sandboxes:read, secrets:use, sandbox:<id>, ... (default *)"),
  Flag.atLeast(0)
)

const keyLine = (k: ApiKey) =>
  [
    k.id,
    k.prefix.padEnd(17),
    (k.revokedAt !== null
      ? "revoked"
      : k.expiresAt !== null && Date.parse(k.expiresAt) <= Date.now()
      ? "expired"
      : "active")
      .padEnd(7),
    k.scopes.join(","),
    k.name
  ].join("  ")

const keyList = Command.make(
  "list",
  { limit: Flag.Int("limit").pipe(Flag.optional), offset: Flag.Int("offset").pipe(Flag.optional), json },
  Effect.fn(function*(o) {
    const page = yield* call((svc) =>
      svc.keys.list({ limit: Option.getOrUndefined(o.limit), offset: Option.getOrUndefined(o.offset) })
    )
    if (o.json) return yield* print(page)
    for (const k of page.keys) yield* Console.log(keyLine(k))
    yield* Console.log(`${page.keys.length} of ${page.total}`)
  })
).pipe(Command.withDescription("List the org's API keys (never their tokens), revoked ones included"))

const keyMint = Command.make(
  "mint",
  {
    name: Flag.String("name").pipe(Flag.withDescription("The key's name (1 to 120 characters)")),
    scopes: scopeFlag,
    expiresAt: Flag.String("expires-at").pipe(
      Flag.withDescription("ISO 8601 expiry, in the future (default: never)"),
      Flag.optional
    ),
    json
  },
  Effect.fn(function*(o) {
    const minted = yield* call((svc) =>
      svc.keys.create({
        name: o.name,
        ...(o.scopes.length > 0 ? { scopes: o.scopes } : {}),
        ...(Option.isSome(o.expiresAt) ? { expires_at: o.expiresAt.value } : {})
      })
    )
    yield* Console.error("The token is shown only now: store it safely (`svc key list` shows its prefix).")
    if (o.json) return yield* print(minted)
    yield* Console.log(`key_id   ${minted.id}`)
    yield* Console.log(`scopes   ${minted.scopes.join(" ")}`)
    yield* Console.log(`expires  ${minted.expiresAt ?? "never"}`)
    yield* Console.log(`token    ${minted.token}`)
  })
).pipe(Command.withDescription("Mint an API key over the API (a full-access key needed); prints its token once"))

const keyRevoke = Command.make(
  "revoke",
  { keyId: Argument.String("key-id").pipe(Argument.withDescription("The key's id (key_...)")), json },
  Effect.fn(function*(o) {
    const revoked = yield* call((svc) => svc.keys.revoke(o.keyId))
    if (o.json) return yield* print(revoked)
    yield* Console.log(`${revoked.id} revoked at ${revoked.revokedAt}`)
  })
).pipe(Command.withDescription("Revoke an API key: it is refused from now on (again: the same answer)"))

/** `svc key`, with the operator's subcommands where the tree has them. */
export const key = <const Operator extends ReadonlyArray<Command.Command.Any>>(operator: Operator) =>
  Command.make("key").pipe(
    Command.withDescription(
      operator.length === 0
        ? "API keys: list, mint, revoke (over the API)"
        : "API keys: list, mint, revoke (over the API); create (operator, DATABASE_URL)"
    ),
    Command.withSubcommands([keyList, keyMint, keyRevoke, ...operator])
  )
