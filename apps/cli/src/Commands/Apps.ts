/**
 * `svc app create|list|get|scale|update|delete`: a client of the /v1 app routes
 * (docs/contract.md#apps), built on the SDK's `Svc`. Credentials as for `svc sandbox`. API
 * errors print `error <code>: <message>` and exit 1.
 *
 *   svc app create --name web --replicas 2 --env PORT=8080 --port 8080 --wait -- httpd -f -p 8080
 *   svc app list
 *   svc app scale app_... 3
 *   svc app update app_... --env PORT=9090 -- httpd -f -p 9090    # a rolling update
 *   svc app delete app_...
 */
import type { App, UpdateAppParams } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { call, progress } from "../Client.ts"

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))
const appId = Argument.String("app-id").pipe(Argument.withDescription("The app's id (app_...)"))
const env = Flag.KeyValuePair("env").pipe(Flag.withDescription("KEY=VALUE, repeatable (the whole env)"), Flag.optional)

const line = (a: App) =>
  [
    a.id,
    a.name,
    a.state,
    `${a.ready_replicas}/${a.replicas} ready`,
    `rev ${a.revision}`,
    a.cmd.join(" "),
    a.reason ?? ""
  ].join("  ").trimEnd()

const show = (o: { readonly json: boolean }) => (app: App) => o.json ? print(app) : Console.log(line(app))

const wait = Flag.Boolean("wait").pipe(
  Flag.withDescription("Wait until every replica is ready (state running)"),
  Flag.withDefault(false)
)

const waited = (app: App, o: { readonly wait: boolean }) =>
  o.wait
    ? Effect.andThen(
      Effect.sync(() => progress("waiting for its replicas")(app)),
      call((svc) => svc.apps.waitUntilRunning(app.id))
    )
    : Effect.succeed(app)

const create = Command.make(
  "create",
  {
    name: Flag.String("name").pipe(Flag.withDescription("Its name: a-z, 0-9 and -")),
    template: Flag.String("template").pipe(Flag.withDescription("A template id or name"), Flag.withDefault("base")),
    replicas: Flag.Int("replicas").pipe(Flag.withDescription("How many sandboxes run it (default 1)"), Flag.optional),
    env,
    ports: Flag.Int("port").pipe(
      Flag.withDescription("A port to expose on every replica, repeatable"),
      Flag.atLeast(0)
    ),
    key: Flag.String("idempotency-key").pipe(
      Flag.withDescription("Sent as Idempotency-Key: the same key and options again answer the same app"),
      Flag.optional
    ),
    cmd: Argument.String("cmd").pipe(
      Argument.variadic({ min: 1 }),
      Argument.withDescription("The program and its arguments (after --), run in every replica")
    ),
    wait,
    json
  },
  Effect.fn(function*(o) {
    const created = yield* call((svc) =>
      svc.apps.create({
        name: o.name,
        template: o.template,
        cmd: o.cmd,
        ...(Option.isSome(o.replicas) ? { replicas: o.replicas.value } : {}),
        ...(Option.isSome(o.env) ? { env: o.env.value } : {}),
        ...(o.ports.length > 0 ? { exposed_ports: o.ports } : {})
      }, { idempotencyKey: Option.getOrUndefined(o.key) })
    )
    yield* show(o)(yield* waited(created, o))
  })
).pipe(Command.withDescription("Create an app: sandboxes of a template kept running a command"))

const list = Command.make(
  "list",
  { limit: Flag.Int("limit").pipe(Flag.optional), offset: Flag.Int("offset").pipe(Flag.optional), json },
  Effect.fn(function*(o) {
    const page = yield* call((svc) =>
      svc.apps.list({ limit: Option.getOrUndefined(o.limit), offset: Option.getOrUndefined(o.offset) })
    )
    if (o.json) return yield* print(page)
    for (const a of page.apps) yield* Console.log(line(a))
    yield* Console.log(`${page.apps.length} of ${page.total}`)
  })
).pipe(Command.withDescription("List the org's apps"), Command.withAlias("ls"))

const get = Command.make(
  "get",
  { appId, json },
  (o) => Effect.flatMap(call((svc) => svc.apps.get(o.appId)), show(o))
).pipe(Command.withDescription("Show one app (its state, ready replicas and sandboxes)"))

const scale = Command.make(
  "scale",
  {
    appId,
    replicas: Argument.Int("replicas").pipe(Argument.withDescription("How many replicas")),
    wait,
    json
  },
  Effect.fn(function*(o) {
    const scaled = yield* call((svc) => svc.apps.scale(o.appId, o.replicas))
    yield* show(o)(yield* waited(scaled, o))
  })
).pipe(Command.withDescription("Scale an app up or down"))

const update = Command.make(
  "update",
  {
    appId,
    replicas: Flag.Int("replicas").pipe(Flag.optional),
    env,
    cmd: Argument.String("cmd").pipe(
      Argument.variadic(),
      Argument.withDescription("A new command (after --); none: the same")
    ),
    wait,
    json
  },
  Effect.fn(function*(o) {
    const patch: UpdateAppParams = {
      ...(Option.isSome(o.replicas) ? { replicas: o.replicas.value } : {}),
      ...(Option.isSome(o.env) ? { env: o.env.value } : {}),
      ...(o.cmd.length > 0 ? { cmd: o.cmd } : {})
    }
    const updated = yield* call((svc) => svc.apps.update(o.appId, patch))
    yield* show(o)(yield* waited(updated, o))
  })
).pipe(Command.withDescription("Change an app's replicas, env or command (a new env or command rolls the replicas)"))

const remove = Command.make(
  "delete",
  { appId, json },
  Effect.fn(function*(o) {
    const deleted = yield* call((svc) => svc.apps.delete(o.appId))
    if (o.json) return yield* print(deleted)
    yield* Console.log(`${deleted.id} ${deleted.state}`)
  })
).pipe(Command.withDescription("Delete an app and its sandboxes"))

export const app = Command.make("app").pipe(
  Command.withDescription("Apps: long-running deployments of a command on sandboxes"),
  Command.withSubcommands([create, list, get, scale, update, remove])
)
