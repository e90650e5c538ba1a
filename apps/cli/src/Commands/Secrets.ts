/**
 * `svc secret create|list|get|rotate|update|delete`: a client of the /v1 secret routes.
 *
 * Built on the SDK's `Svc`; credentials as for `svc sandbox` (`SVC_API_KEY`, `SVC_API_URL`, or the dev stack's file). A
 * value is never an argument (it would show in the process list and the shell's history): it is
 * read from standard input (one trailing newline dropped) or from `--value-file`. Nothing prints
 * a value: the API never returns one. API errors print `error <code>: <message>` and exit 1.
 *
 *   printf %s "$OPENAI_API_KEY" | svc secret create --name openai --host api.openai.com
 *   svc secret create --name gh --host api.github.com --header Authorization --format 'token {value}' --value-file ./gh
 *   svc secret rotate sec_... --value-file ./new-key
 *   svc secret update sec_... --host api.openai.com --host '*.openai.com'
 */
import type { Secret } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Fs from "node:fs"
import { call, CliError } from "../Client.ts"

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))
const secretId = Argument.String("secret-id").pipe(Argument.withDescription("The secret's id (sec_...)"))
const valueFile = Flag.String("value-file").pipe(
  Flag.withDescription("Read the value from this file (default: standard input)"),
  Flag.optional
)
const hosts = Flag.String("host").pipe(
  Flag.withDescription("An allowed host (api.example.com or *.example.com); repeatable"),
  Flag.atLeast(0)
)
const headerName = Flag.String("header").pipe(
  Flag.withDescription("The header the proxy writes (default Authorization)"),
  Flag.optional
)
const headerFormat = Flag.String("format").pipe(
  Flag.withDescription("The header's value, {value} standing for the secret (default 'Bearer {value}')"),
  Flag.optional
)

/** The value, from the file or standard input; one trailing newline (of `echo`) dropped. */
const readValue = (file: Option.Option<string>) =>
  Effect.try({
    try: () => Fs.readFileSync(Option.isSome(file) ? file.value : 0, "utf8").replace(/\r?\n$/, ""),
    catch: (e) => new CliError({ message: `cannot read the value: ${String(e)}` })
  })

const line = (s: Secret) =>
  [s.id, s.name, `${s.header_name}: ${s.header_format}`, s.allowed_hosts.join(","), s.rotatedAt ?? "-"].join("  ")

const show = (o: { readonly json: boolean }) => (secret: Secret) => o.json ? print(secret) : Console.log(line(secret))

const optionalField = <A>(name: string, value: Option.Option<A>) => Option.isSome(value) ? { [name]: value.value } : {}

const create = Command.make(
  "create",
  { name: Flag.String("name"), hosts, headerName, headerFormat, valueFile, json },
  Effect.fn(function*(o) {
    if (o.hosts.length === 0) return yield* new CliError({ message: "at least one --host" })
    const value = yield* readValue(o.valueFile)
    const created = yield* call((svc) =>
      svc.secrets.create({
        name: o.name,
        value,
        allowed_hosts: o.hosts,
        ...optionalField("header_name", o.headerName),
        ...optionalField("header_format", o.headerFormat)
      })
    )
    yield* show(o)(created)
  })
).pipe(Command.withDescription("Create a secret; its value from standard input or --value-file"))

const list = Command.make(
  "list",
  { limit: Flag.Int("limit").pipe(Flag.optional), offset: Flag.Int("offset").pipe(Flag.optional), json },
  Effect.fn(function*(o) {
    const page = yield* call((svc) =>
      svc.secrets.list({ limit: Option.getOrUndefined(o.limit), offset: Option.getOrUndefined(o.offset) })
    )
    if (o.json) return yield* print(page)
    for (const s of page.secrets) yield* Console.log(line(s))
    yield* Console.log(`${page.secrets.length} of ${page.total}`)
  })
).pipe(Command.withDescription("List the org's secrets (metadata only)"), Command.withAlias("ls"))

const get = Command.make(
  "get",
  { secretId, json },
  (o) => Effect.flatMap(call((svc) => svc.secrets.get(o.secretId)), show(o))
).pipe(Command.withDescription("Show one secret's metadata"))

const rotate = Command.make(
  "rotate",
  { secretId, valueFile, json },
  Effect.fn(function*(o) {
    const value = yield* readValue(o.valueFile)
    yield* show(o)(yield* call((svc) => svc.secrets.rotate(o.secretId, value)))
  })
).pipe(Command.withDescription("Replace a secret's value (standard input or --value-file)"))

const update = Command.make(
  "update",
  { secretId, hosts, headerName, headerFormat, json },
  Effect.fn(function*(o) {
    const patch = {
      ...(o.hosts.length > 0 ? { allowed_hosts: o.hosts } : {}),
      ...optionalField("header_name", o.headerName),
      ...optionalField("header_format", o.headerFormat)
    }
    if (Object.keys(patch).length === 0) {
      return yield* new CliError({ message: "nothing to change: --host, --header or --format" })
    }
    yield* show(o)(yield* call((svc) => svc.secrets.update(o.secretId, patch)))
  })
).pipe(Command.withDescription("Change where (--host) or how (--header, --format) the proxy writes a secret"))

const remove = Command.make(
  "delete",
  { secretId, json },
  Effect.fn(function*(o) {
    const deleted = yield* call((svc) => svc.secrets.delete(o.secretId))
    if (o.json) return yield* print(deleted)
    yield* Console.log(`${deleted.id} deleted`)
  })
).pipe(Command.withDescription("Delete a secret (it leaves every sandbox it was bound to)"))

export const secret = Command.make("secret").pipe(
  Command.withDescription("Org secrets the egress proxy writes onto sandboxes' requests"),
  Command.withSubcommands([create, list, get, rotate, update, remove])
)
