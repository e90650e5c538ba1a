/**
 * `svc template create|list|get|logs|delete`: a client of the /v1 template routes.
 *
 * Built on the SDK's `Svc`; credentials as for `svc sandbox`. `create` reads the template from a JSON file (the body of
 * `POST /v1/templates`: `{name, base, steps, start_cmd, ready_cmd}`; `--name` and `--base`
 * override it); with `--wait` it prints the build's log as it runs and exits 1 when the build
 * fails. API errors print `error <code>: <message>` and exit 1.
 *
 *   svc template create --file app.json --wait
 *   svc template logs tpl_... --follow
 *   svc sandbox create --template app --wait
 */
import type { CreateTemplateParams, Template } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Fs from "node:fs"
import { call, CliError } from "../Client.ts"

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))
const templateId = Argument.String("template").pipe(Argument.withDescription("The template's id (tpl_...) or name"))
const wait = Flag.Boolean("wait").pipe(
  Flag.withDescription("Print the build's log until it ends; exit 1 if it failed"),
  Flag.withDefault(false)
)

const line = (t: Template) =>
  [t.id, t.name, t.state, `base=${t.base}`, t.state === "failed" ? t.errorMessage : t.image ?? "-"].join("  ")

const show = (o: { readonly json: boolean }) => (template: Template) =>
  o.json ? print(template) : Console.log(line(template))

/** The template file: a JSON object (the API checks its fields). */
const readFile = (file: string) =>
  Effect.try({
    try: () => {
      const value = JSON.parse(Fs.readFileSync(file, "utf8"))
      if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Error("not a JSON object")
      return value as Record<string, unknown>
    },
    catch: (e) => new CliError({ message: `cannot read ${file}: ${e instanceof Error ? e.message : String(e)}` })
  })

/**
 * Follows a build's log to its end (on stderr: stdout keeps the record), then the record; a
 * failed build exits 1.
 */
export const followBuild = (id: string, o: { readonly json: boolean }) =>
  Effect.gen(function*() {
    yield* call(async (svc) => {
      for await (const text of svc.templates.followLogs(id)) process.stderr.write(text)
    })
    // The log ends as the row leaves `building`; read it until it says so.
    let record = yield* call((svc) => svc.templates.get(id))
    while (record.state === "building") {
      yield* Effect.sleep("500 millis")
      record = yield* call((svc) => svc.templates.get(id))
    }
    yield* show(o)(record)
    if (record.state === "failed") return yield* new CliError({ message: `build failed: ${record.errorMessage}` })
  })

const create = Command.make(
  "create",
  {
    file: Flag.String("file").pipe(
      Flag.withAlias("f"),
      Flag.withDescription("A JSON file: {name, base, steps, start_cmd, ready_cmd}")
    ),
    name: Flag.String("name").pipe(Flag.withDescription("The template's name (over the file's)"), Flag.optional),
    base: Flag.String("base").pipe(
      Flag.withDescription("base, debian, or a ready template (over the file's)"),
      Flag.optional
    ),
    wait,
    json
  },
  Effect.fn(function*(o) {
    const body = {
      ...(yield* readFile(o.file)),
      ...(Option.isSome(o.name) ? { name: o.name.value } : {}),
      ...(Option.isSome(o.base) ? { base: o.base.value } : {})
    }
    const created = yield* call((svc) => svc.templates.create(body as CreateTemplateParams, { wait: false }))
    if (!o.wait) return yield* show(o)(created)
    yield* followBuild(created.id, o)
  })
).pipe(Command.withDescription("Build a template from a JSON file of steps (asynchronous; --wait follows it)"))

const list = Command.make(
  "list",
  { limit: Flag.Int("limit").pipe(Flag.optional), offset: Flag.Int("offset").pipe(Flag.optional), json },
  Effect.fn(function*(o) {
    const page = yield* call((svc) =>
      svc.templates.list({ limit: Option.getOrUndefined(o.limit), offset: Option.getOrUndefined(o.offset) })
    )
    if (o.json) return yield* print(page)
    for (const t of page.rows) yield* Console.log(line(t))
    yield* Console.log(`${page.rows.length} of ${page.total}`)
  })
).pipe(Command.withDescription("List the org's templates"), Command.withAlias("ls"))

const get = Command.make(
  "get",
  { templateId, json },
  (o) => Effect.flatMap(call((svc) => svc.templates.get(o.templateId)), show(o))
).pipe(Command.withDescription("Show one template"))

const logs = Command.make(
  "logs",
  {
    templateId,
    follow: Flag.Boolean("follow").pipe(
      Flag.withDescription("Keep printing until the build ends"),
      Flag.withDefault(false)
    )
  },
  (o) =>
    call(async (svc) => {
      if (!o.follow) return void process.stdout.write(await svc.templates.logs(o.templateId))
      for await (const text of svc.templates.followLogs(o.templateId)) process.stdout.write(text)
    })
).pipe(Command.withDescription("Print a template's build log"))

const remove = Command.make(
  "delete",
  { templateId, json },
  Effect.fn(function*(o) {
    const deleted = yield* call((svc) => svc.templates.delete(o.templateId))
    if (o.json) return yield* print(deleted)
    yield* Console.log(`${deleted.id} deleted`)
  })
).pipe(Command.withDescription("Delete a template (refused while a sandbox uses it)"))

const pool = Command.make(
  "pool",
  {
    templateId,
    size: Argument.Int("size").pipe(
      Argument.withDescription("Sandboxes kept booted and handed out on create (0 to 50; 0 drains the pool)")
    ),
    json
  },
  Effect.fn(function*(o) {
    const updated = yield* call((svc) => svc.templates.update(o.templateId, { pool_size: o.size }))
    if (o.json) return yield* print(updated)
    yield* Console.log(`${updated.id}  ${updated.name}  pool_size=${updated.pool_size}`)
  })
).pipe(Command.withDescription("Set a template's warm pool size"))

export const template = Command.make("template").pipe(
  Command.withDescription("Templates: images built from steps that sandboxes start from"),
  Command.withSubcommands([create, list, get, logs, remove, pool])
)
