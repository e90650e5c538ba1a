/**
 * `svc template create|build|list|get|logs|delete|pool`: a client of the /v1 template routes.
 *
 * Built on the SDK's `Svc`; credentials as for `svc sandbox`. `create` reads the template from a
 * JSON file (the body of `POST /v1/templates`: `{name, base, steps, start_cmd, ready_cmd}`;
 * `--name` and `--base` override it) or takes an OCI image reference (`--image`, with
 * `--registry-secret` for a private registry); `build ./folder` builds the folder's Dockerfile
 * with the folder as its context (packed by the SDK) and `--build-arg K=V`s, following its log.
 * With `--wait` (always for `build`) it prints the build's log as it runs and exits 1 when the
 * build fails. API errors print `error <code>: <message>` and exit 1.
 *
 *   svc template create --file app.json --wait
 *   svc template create --name py --image docker.io/library/python:3.12-slim --wait
 *   svc template build ./app --name app --build-arg VERSION=1.2
 *   svc template logs tpl_... --follow
 *   svc sandbox create --template app --wait
 */
import type { CreateTemplateInput, Template } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Fs from "node:fs"
import * as NodePath from "node:path"
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
      Flag.withDescription("A JSON file: {name, base, steps, start_cmd, ready_cmd}"),
      Flag.optional
    ),
    name: Flag.String("name").pipe(Flag.withDescription("The template's name (over the file's)"), Flag.optional),
    base: Flag.String("base").pipe(
      Flag.withDescription("base, debian, or a ready template (over the file's)"),
      Flag.optional
    ),
    image: Flag.String("image").pipe(
      Flag.withDescription("An OCI image reference (registry/repository:tag or @sha256:...) to start from"),
      Flag.optional
    ),
    registrySecret: Flag.String("registry-secret").pipe(
      Flag.withDescription("The org secret (id or name) holding the registry's user:password or token"),
      Flag.optional
    ),
    wait,
    json
  },
  Effect.fn(function*(o) {
    if (Option.isNone(o.file) && Option.isNone(o.image)) {
      return yield* new CliError({ message: "give --file with the template's JSON, or --image with a reference" })
    }
    const fromFile = Option.isSome(o.file) ? yield* readFile(o.file.value) : {}
    // A file's context is the API's base64; the SDK takes its bytes.
    const context = typeof fromFile["context"] === "string"
      ? { context: Buffer.from(fromFile["context"], "base64") }
      : {}
    const body = {
      ...fromFile,
      ...context,
      ...(Option.isSome(o.name) ? { name: o.name.value } : {}),
      ...(Option.isSome(o.base) ? { base: o.base.value } : {}),
      ...(Option.isSome(o.image) ? { image: o.image.value } : {}),
      ...(Option.isSome(o.registrySecret) ? { registry_secret: o.registrySecret.value } : {})
    }
    if (typeof body["name"] !== "string") return yield* new CliError({ message: "give the template a --name" })
    const created = yield* call((svc) => svc.templates.create(body as CreateTemplateInput, { wait: false }))
    if (!o.wait) return yield* show(o)(created)
    yield* followBuild(created.id, o)
  })
).pipe(
  Command.withDescription(
    "Build a template from a JSON file of steps or from an image (asynchronous; --wait follows it)"
  )
)

/** `K=V` build args; a bad one is an error naming it. */
const buildArgs = (pairs: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const args: Record<string, string> = {}
    for (const pair of pairs) {
      const eq = pair.indexOf("=")
      if (eq <= 0) return yield* new CliError({ message: `--build-arg ${pair}: expected NAME=value` })
      args[pair.slice(0, eq)] = pair.slice(eq + 1)
    }
    return args
  })

const build = Command.make(
  "build",
  {
    folder: Argument.String("folder").pipe(
      Argument.withDescription("A folder with a Dockerfile; the whole folder is the build's context")
    ),
    name: Flag.String("name").pipe(
      Flag.withDescription("The template's name (default: the folder's name)"),
      Flag.optional
    ),
    file: Flag.String("file").pipe(
      Flag.withAlias("f"),
      Flag.withDescription("The Dockerfile (default: <folder>/Dockerfile)"),
      Flag.optional
    ),
    buildArg: Flag.String("build-arg").pipe(
      Flag.withDescription("NAME=value for an ARG of the Dockerfile (repeatable)"),
      Flag.atLeast(0)
    ),
    json
  },
  Effect.fn(function*(o) {
    const folder = NodePath.resolve(o.folder)
    const dockerfilePath = Option.getOrElse(o.file, () => NodePath.join(folder, "Dockerfile"))
    const dockerfile = yield* Effect.try({
      try: () => Fs.readFileSync(dockerfilePath, "utf8"),
      catch: (e) =>
        new CliError({
          message: `cannot read ${dockerfilePath}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`
        })
    })
    const name = Option.getOrElse(o.name, () => NodePath.basename(folder))
    const build_args = yield* buildArgs(o.buildArg)
    const created = yield* call((svc) =>
      svc.templates.create({
        name,
        dockerfile,
        context: folder,
        ...(Object.keys(build_args).length > 0 ? { build_args } : {})
      }, { wait: false })
    )
    yield* followBuild(created.id, o)
  })
).pipe(
  Command.withDescription("Build a template from a folder's Dockerfile, the folder as its context; follows the log")
)

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
  Command.withDescription(
    "Templates: root file systems (from steps, an image or a Dockerfile) that sandboxes start from"
  ),
  Command.withSubcommands([create, build, list, get, logs, remove, pool])
)
