/**
 * `svc volume create|list|get|delete`: a client of the /v1 volume routes
 * (docs/contract.md#volumes), built on the SDK's `Svc`. Credentials as for `svc sandbox`. API errors print
 * `error <code>: <message>` and exit 1.
 *
 *   svc volume create --size 10                       # a local volume named after its id
 *   svc volume create --name datasets --type shared --size 50 --idempotency-key run-42
 *   svc volume list
 *   svc sandbox create --volume vol_...:/data          # see `svc sandbox create --help`
 */
import type { CreateSandboxParams, Volume } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { call } from "../Client.ts"

/**
 * `svc sandbox create --volume`: `VOLUME_ID:MOUNT_PATH[:SUBPATH][:ro|rw]` as a `volumes` entry
 * (a mount path or subpath holding `:` needs the API itself).
 */
export const parseVolumeFlag = (text: string): NonNullable<CreateSandboxParams["volumes"]>[number] => {
  const [volume_id = "", mount_path = "", ...rest] = text.split(":")
  const last = rest.at(-1)
  const mode = last === "ro" || last === "rw" ? last : undefined
  const subpath = (mode === undefined ? rest : rest.slice(0, -1)).join(":")
  return {
    volume_id,
    mount_path,
    ...(subpath !== "" ? { subpath } : {}),
    ...(mode !== undefined ? { mode } : {})
  }
}

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))
const volumeId = Argument.String("volume-id").pipe(Argument.withDescription("The volume's id (vol_...)"))

const line = (v: Volume) =>
  [
    v.id,
    v.name,
    v.type,
    `${v.size_gb} GiB`,
    v.state,
    v.attachments.length > 0 ? v.attachments.map((a) => `${a.sandbox_id}:${a.mount_path}`).join(",") : "-",
    v.host_id ?? "-"
  ].join("  ")

const show = (o: { readonly json: boolean }) => (volume: Volume) => o.json ? print(volume) : Console.log(line(volume))

const create = Command.make(
  "create",
  {
    size: Flag.Int("size").pipe(Flag.withDescription("Size in GiB (size_gb)")),
    name: Flag.String("name").pipe(Flag.withDescription("Its name (required for --type shared)"), Flag.optional),
    type: Flag.Literals("type", ["local", "shared"]).pipe(
      Flag.withDescription("local (default: lives on one host) or shared (several sandboxes, any host)"),
      Flag.withDefault("local" as const)
    ),
    key: Flag.String("idempotency-key").pipe(
      Flag.withDescription("Sent as Idempotency-Key: the same key and options again answer the same volume"),
      Flag.optional
    ),
    json
  },
  Effect.fn(function*(o) {
    const created = yield* call((svc) =>
      svc.volumes.create(
        { size_gb: o.size, type: o.type, ...(Option.isSome(o.name) ? { name: o.name.value } : {}) },
        { idempotencyKey: Option.getOrUndefined(o.key) }
      )
    )
    yield* show(o)(created)
  })
).pipe(Command.withDescription("Create a volume"))

const list = Command.make(
  "list",
  { limit: Flag.Int("limit").pipe(Flag.optional), offset: Flag.Int("offset").pipe(Flag.optional), json },
  Effect.fn(function*(o) {
    const page = yield* call((svc) =>
      svc.volumes.list({ limit: Option.getOrUndefined(o.limit), offset: Option.getOrUndefined(o.offset) })
    )
    if (o.json) return yield* print(page)
    for (const v of page.volumes) yield* Console.log(line(v))
    yield* Console.log(`${page.volumes.length} of ${page.total}`)
  })
).pipe(Command.withDescription("List the org's volumes"), Command.withAlias("ls"))

const get = Command.make(
  "get",
  { volumeId, json: Flag.Boolean("json").pipe(Flag.withDefault(true), Flag.withDescription("Print the JSON record")) },
  (o) => Effect.flatMap(call((svc) => svc.volumes.get(o.volumeId)), show(o))
).pipe(Command.withDescription("Show one volume (its attachments included)"))

const remove = Command.make(
  "delete",
  { volumeId, json },
  Effect.fn(function*(o) {
    const deleted = yield* call((svc) => svc.volumes.delete(o.volumeId))
    if (o.json) return yield* print(deleted)
    yield* Console.log(`${deleted.id} deleted`)
  })
).pipe(Command.withDescription("Delete a volume and its data (refused while a sandbox has it)"))

export const volume = Command.make("volume").pipe(
  Command.withDescription("Volumes: storage that outlives sandboxes"),
  Command.withSubcommands([create, list, get, remove])
)
