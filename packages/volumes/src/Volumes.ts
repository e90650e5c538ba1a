/**
 * Volumes as the API sees them (docs/contract.md#volumes): create, list, get, delete. Every
 * operation is confined to the caller's org (another org's volume is `not_found`); callers
 * check the `volumes` scopes first.
 *
 * - Create checks, in order: `name` present for a `shared` volume (400 naming `name`), `size_gb`
 *   within `SVC_VOLUME_MAX_GIB` (400 `volume_capacity_above_max`, the exact body of docs/contract.md#volumes),
 *   then in one transaction the org's quota (`SVC_ORG_MAX_VOLUMES`, under the org's row lock,
 *   as the sandbox quotas take it), the name's uniqueness (409) and the insert with its `volumes`
 *   KV entry. `Idempotency-Key` through @svc/db/Idempotency (operation `volumes.create`).
 * - Nothing is made on a host at create: the host that first mounts the volume makes its image
 *   (a sparse file, so its size costs nothing until written). A local volume's `host_id` is set
 *   then, by the sandbox's placement.
 * - Delete locks the volume's row (a sandbox create attaching it holds the same lock), refuses
 *   while a sandbox that is not deleted has it (409), marks it deleted and deletes its KV entry:
 *   the hosts then remove its image. Delete is soft; the id is never reused.
 */
import { ensureBucket } from "@svc/bus/Topology"
import { Idempotency, type Outcome } from "@svc/db/Idempotency"
import type * as Rows from "@svc/db/Rows"
import * as Errors from "@svc/domain/Errors"
import { makeId, type OrgId } from "@svc/domain/Ids"
import { type ListQuery, pageInfo } from "@svc/domain/Pagination"
import { type CreateVolumeRequest, derivedVolumeName, Volume, type VolumeList } from "@svc/domain/Volume"
import * as Outbox from "@svc/events/Outbox"
import { wakeIfPresent } from "@svc/events/Relay"
import { volumeKey, VOLUMES_BUCKET, VOLUMES_BUCKET_SPEC } from "@svc/host-protocol/Volumes"
import { Context, Duration, Effect, Layer, Option, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { VolumesConfig } from "./Config.ts"
import * as Store from "./Volumes/Store.ts"

const notFound = () => new Errors.NotFound({ error: "No such volume" })
const encodeVolume = Schema.encodeSync(Volume)

export class Volumes extends Context.Service<Volumes, {
  readonly create: (
    orgId: OrgId,
    input: CreateVolumeRequest,
    idempotencyKey: string | undefined
  ) => Effect.Effect<
    Outcome<Volume>,
    | Errors.InvalidRequest
    | Errors.VolumeCapacityAboveMax
    | Errors.Conflict
    | Errors.QuotaExceeded
    | Errors.IdempotencyKeyReused
    | Rows.QueryError
  >
  readonly list: (orgId: OrgId, query: ListQuery) => Effect.Effect<VolumeList, Rows.QueryError>
  readonly get: (orgId: OrgId, id: string) => Effect.Effect<Volume, Errors.NotFound | Rows.QueryError>
  readonly remove: (
    orgId: OrgId,
    id: string
  ) => Effect.Effect<Volume, Errors.NotFound | Errors.Conflict | Rows.QueryError>
}>()("@svc/volumes/Volumes") {
  static readonly make = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const idempotency = yield* Idempotency
    const settings = yield* VolumesConfig
    const withSql = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
      Effect.provideService(effect, SqlClient.SqlClient, sql)
    const append = (message: Outbox.OutboxMessage) =>
      Outbox.append(message).pipe(Effect.catchTag("InvalidOutboxMessage", Effect.die), withSql)
    // The relay puts into this bucket: make sure it exists, without holding up the start while
    // NATS is away (the relay retries a put until it does).
    yield* Effect.forkScoped(
      ensureBucket(VOLUMES_BUCKET_SPEC).pipe(
        Effect.tapError((e) => Effect.logWarning("volumes: bucket not ensured yet, retrying", { error: e.message })),
        Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(200)), Schedule.spaced(Duration.seconds(5))]))
      )
    )

    const create = Effect.fn("Volumes.create")(
      function*(orgId: OrgId, input: CreateVolumeRequest, idempotencyKey: string | undefined) {
        if (input.type === "shared" && input.name === undefined) {
          return yield* new Errors.InvalidRequest({
            error: "Invalid request body: name is required for a shared volume",
            issues: [{ path: "name", message: "required for a shared volume" }]
          })
        }
        if (input.size_gb > settings.maxGib) {
          return yield* new Errors.VolumeCapacityAboveMax({
            error: `size_gb ${input.size_gb} is above the maximum volume size of ${settings.maxGib} GiB`,
            requested_gib: input.size_gb,
            max_gib: settings.maxGib
          })
        }
        const id = makeId("volume")
        const outcome = yield* idempotency.run({
          orgId,
          operation: "volumes.create",
          key: idempotencyKey,
          request: input,
          response: encodeVolume,
          create: Effect.gen(function*(): Effect.fn.Return<
            Volume,
            Errors.Conflict | Errors.QuotaExceeded | Rows.QueryError
          > {
            // The org's row, as the sandbox quotas lock it: concurrent creates count one at a time.
            yield* withSql(
              Effect.flatMap(SqlClient.SqlClient, (s) => s`SELECT 1 FROM orgs WHERE id = ${orgId} FOR NO KEY UPDATE`)
            )
            if ((yield* withSql(Store.countLive(orgId))) >= settings.maxPerOrg) {
              return yield* new Errors.QuotaExceeded({
                error: `The org has reached its quota of ${settings.maxPerOrg} volumes (SVC_ORG_MAX_VOLUMES); ` +
                  "delete one first",
                quota: "volumes",
                limit: settings.maxPerOrg
              })
            }
            const row = yield* withSql(Store.insert({
              id,
              orgId,
              name: input.name ?? derivedVolumeName(id),
              type: input.type,
              sizeGb: input.size_gb
            }))
            if (Option.isNone(row)) {
              return yield* new Errors.Conflict({ error: "The org already has a volume with this name" })
            }
            yield* append(Outbox.kvPut(VOLUMES_BUCKET, volumeKey(id), {
              volumeId: id,
              orgId,
              type: input.type,
              sizeGb: input.size_gb
            }))
            return Store.toVolume(row.value, [])
          })
        })
        yield* wakeIfPresent
        return outcome
      }
    )

    const list = Effect.fn("Volumes.list")(function*(orgId: OrgId, query: ListQuery) {
      const [rows, total] = yield* withSql(Store.page(orgId, query.limit, query.offset))
      const attached = yield* withSql(Store.attachments(orgId, rows.map((r) => r.id)))
      const volumes = rows.map((row) => Store.toVolume(row, attached))
      return { volumes, ...pageInfo(query, rows.length, total) } satisfies VolumeList
    })

    const get = Effect.fn("Volumes.get")(function*(orgId: OrgId, id: string) {
      const row = yield* withSql(Store.find(orgId, id))
      if (Option.isNone(row)) return yield* notFound()
      return Store.toVolume(row.value, yield* withSql(Store.attachments(orgId, [id])))
    })

    const remove = Effect.fn("Volumes.remove")(function*(orgId: OrgId, id: string) {
      const row = yield* sql.withTransaction(Effect.gen(function*() {
        const found = yield* withSql(Store.find(orgId, id, true))
        if (Option.isNone(found)) return yield* notFound()
        const attached = yield* withSql(Store.attachments(orgId, [id]))
        if (attached.length > 0) {
          const names = [...new Set(attached.map((a) => a.sandbox_id))].join(", ")
          return yield* new Errors.Conflict({
            error: `The volume is attached to ${names}; delete the sandbox first`
          })
        }
        const deleted = yield* withSql(Store.markDeleted(orgId, id))
        if (Option.isNone(deleted)) return yield* notFound()
        yield* append(Outbox.kvDelete(VOLUMES_BUCKET, volumeKey(id)))
        return deleted.value
      }))
      yield* wakeIfPresent
      return Store.toVolume(row, [])
    })

    return Volumes.of({
      create: (orgId, input, key) => create(orgId, input, key),
      list,
      get,
      remove
    })
  })

  /** Needs SqlClient, Nats (the `volumes` bucket) and SecretBox (the Idempotency-Key entries are sealed). */
  static readonly layer = Layer.effect(Volumes, Volumes.make).pipe(Layer.provide(Idempotency.layer))
}
