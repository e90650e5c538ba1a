/**
 * The org, over the API (a full-access key): `svc org get`, `svc org rename <name>`.
 *
 * The repository's `svc` adds the operator's `svc org create <name>` (`Operator.ts`): an org and
 * its bootstrap key, against DATABASE_URL.
 */
import { Console, Effect } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { call } from "../Client.ts"

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

/** `svc org`, with the operator's subcommands where the tree has them. */
export const org = <const Operator extends ReadonlyArray<Command.Command.Any>>(operator: Operator) =>
  Command.make("org").pipe(
    Command.withDescription(
      operator.length === 0
        ? "The org: get, rename (over the API)"
        : "The org: get, rename (over the API); create (operator, DATABASE_URL)"
    ),
    Command.withSubcommands([orgGet, orgRename, ...operator])
  )
