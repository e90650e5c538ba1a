/**
 * Org secrets as the API sees them (docs/contract.md#secrets): create, list, get, rotate the
 * value, update where and how it is written, delete. Every operation is confined to the caller's
 * org (another org's secret is `not_found`); callers check scopes and the service-key rule first
 * (`@svc/auth/Authorization`).
 *
 * - The value is sealed with SecretBox (AAD `secret:<id>`) before it reaches a statement, and
 *   returned by nothing here: records are metadata.
 * - Each change, its audit entry (`secret.created`, `.rotated`, `.updated`, `.deleted`, target the
 *   id, never a value) and its `egress` KV entries (`Secrets/Egress.ts`) commit together: the
 *   outbox relay then puts them into the bucket the hosts' proxies watch.
 * - Names are unique among the org's live secrets: 409 `conflict` otherwise.
 * - `Idempotency-Key` on create through @svc/db/Idempotency (operation `secrets.create`).
 * - Delete is soft (the id is never reused) and unbinds the secret from every sandbox, whose
 *   entries are put again without it.
 */
import { Audit, type AuditContext } from "@svc/auth/Audit"
import { ensureBucket } from "@svc/bus/Topology"
import { SecretBox } from "@svc/crypto/SecretBox"
import { Idempotency, type Outcome } from "@svc/db/Idempotency"
import type * as Rows from "@svc/db/Rows"
import * as Errors from "@svc/domain/Errors"
import { makeId, type OrgId } from "@svc/domain/Ids"
import { type ListQuery, pageInfo } from "@svc/domain/Pagination"
import { type CreateSecretRequest, type PatchSecretRequest, Secret, type SecretList } from "@svc/domain/Secret"
import * as Outbox from "@svc/events/Outbox"
import { wakeIfPresent } from "@svc/events/Relay"
import { EGRESS_BUCKET_SPEC, secretValueAad } from "@svc/host-protocol/Egress"
import { Context, Duration, Effect, Layer, Option, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Egress from "./Secrets/Egress.ts"
import * as Store from "./Secrets/Store.ts"

const notFound = () => new Errors.NotFound({ error: "No such secret" })
const encodeSecret = Schema.encodeSync(Secret)

type Failure = Errors.NotFound | Rows.QueryError

export class Secrets extends Context.Service<Secrets, {
  readonly create: (
    orgId: OrgId,
    input: CreateSecretRequest,
    idempotencyKey: string | undefined,
    audit: AuditContext
  ) => Effect.Effect<Outcome<Secret>, Errors.Conflict | Errors.IdempotencyKeyReused | Rows.QueryError>
  readonly list: (orgId: OrgId, query: ListQuery) => Effect.Effect<SecretList, Rows.QueryError>
  readonly get: (orgId: OrgId, id: string) => Effect.Effect<Secret, Failure>
  readonly rotate: (orgId: OrgId, id: string, value: string, audit: AuditContext) => Effect.Effect<Secret, Failure>
  readonly update: (
    orgId: OrgId,
    id: string,
    patch: PatchSecretRequest,
    audit: AuditContext
  ) => Effect.Effect<Secret, Failure>
  readonly remove: (orgId: OrgId, id: string, audit: AuditContext) => Effect.Effect<Secret, Failure>
}>()("@svc/secrets/Secrets") {
  static readonly make = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const box = yield* SecretBox
    const idempotency = yield* Idempotency
    const audit = yield* Audit
    const withSql = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
      Effect.provideService(effect, SqlClient.SqlClient, sql)
    const append = (messages: ReadonlyArray<Outbox.OutboxMessage>) =>
      Outbox.appendAll(messages).pipe(Effect.catchTag("InvalidOutboxMessage", Effect.die), withSql)
    // The relay puts into this bucket: make sure it exists, without holding up the start while
    // NATS is away (the relay retries a put until it does).
    yield* Effect.forkScoped(
      ensureBucket(EGRESS_BUCKET_SPEC).pipe(
        Effect.tapError((e) =>
          Effect.logWarning("secrets: egress bucket not ensured yet, retrying", { error: e.message })
        ),
        Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(200)), Schedule.spaced(Duration.seconds(5))]))
      )
    )

    const create = Effect.fn("Secrets.create")(
      function*(orgId: OrgId, input: CreateSecretRequest, idempotencyKey: string | undefined, context: AuditContext) {
        const id = makeId("secret")
        const sealedValue = yield* box.seal(input.value, secretValueAad(id))
        const outcome = yield* idempotency.run({
          orgId,
          operation: "secrets.create",
          key: idempotencyKey,
          request: input,
          response: encodeSecret,
          create: Effect.gen(function*(): Effect.fn.Return<Secret, Errors.Conflict | Rows.QueryError> {
            const row = yield* withSql(Store.insert({
              id,
              orgId,
              name: input.name,
              allowedHosts: input.allowed_hosts,
              headerName: input.header_name,
              headerFormat: input.header_format,
              sealedValue
            }))
            if (Option.isNone(row)) {
              return yield* new Errors.Conflict({ error: "The org already has a secret with this name" })
            }
            yield* append([Egress.putSecret(row.value)])
            yield* audit.record(orgId, "secret.created", id, context)
            return Store.toSecret(row.value)
          })
        })
        yield* wakeIfPresent
        return outcome
      }
    )

    const list = Effect.fn("Secrets.list")(function*(orgId: OrgId, query: ListQuery) {
      const [rows, total] = yield* withSql(Store.page(orgId, query.limit, query.offset))
      return { secrets: rows.map(Store.toSecret), ...pageInfo(query, rows.length, total) } satisfies SecretList
    })

    const get = Effect.fn("Secrets.get")(function*(orgId: OrgId, id: string) {
      const row = yield* withSql(Store.find(orgId, id))
      if (Option.isNone(row)) return yield* notFound()
      return Store.toSecret(row.value)
    })

    /** One change of the row: the update, its KV entry and its audit entry in one transaction. */
    const change = (
      orgId: OrgId,
      id: string,
      action: "secret.rotated" | "secret.updated",
      fields: Parameters<typeof Store.update>[2],
      context: AuditContext
    ) =>
      Effect.gen(function*() {
        const row = yield* sql.withTransaction(Effect.gen(function*() {
          const row = yield* withSql(Store.update(orgId, id, fields))
          if (Option.isNone(row)) return yield* notFound()
          yield* append([Egress.putSecret(row.value)])
          yield* audit.record(orgId, action, id, context)
          return row.value
        }))
        yield* wakeIfPresent
        return Store.toSecret(row)
      })

    const rotate = Effect.fn("Secrets.rotate")(
      function*(orgId: OrgId, id: string, value: string, context: AuditContext) {
        const sealedValue = yield* box.seal(value, secretValueAad(id))
        return yield* change(orgId, id, "secret.rotated", {
          allowedHosts: null,
          headerName: null,
          headerFormat: null,
          sealedValue
        }, context)
      }
    )

    const update = Effect.fn("Secrets.update")(
      function*(orgId: OrgId, id: string, patch: PatchSecretRequest, context: AuditContext) {
        return yield* change(orgId, id, "secret.updated", {
          allowedHosts: patch.allowed_hosts ?? null,
          headerName: patch.header_name ?? null,
          headerFormat: patch.header_format ?? null,
          sealedValue: null
        }, context)
      }
    )

    const remove = Effect.fn("Secrets.remove")(function*(orgId: OrgId, id: string, context: AuditContext) {
      const row = yield* sql.withTransaction(Effect.gen(function*() {
        const { deleted, sandboxes } = yield* withSql(Store.removeEverywhere(orgId, id))
        if (Option.isNone(deleted)) return yield* notFound()
        // A deleted sandbox has no entry any more: none is put back for it.
        const live = sandboxes.filter((s) => s.state !== "deleted")
        yield* append([Egress.deleteSecret(id), ...live.map(Egress.putSandbox)])
        yield* audit.record(orgId, "secret.deleted", id, context)
        return deleted.value
      }))
      yield* wakeIfPresent
      return Store.toSecret(row)
    })

    return Secrets.of({ create, list, get, rotate, update, remove })
  })

  /** Needs SqlClient, Nats (the egress bucket), SecretBox and Audit. */
  static readonly layer = Layer.effect(Secrets, Secrets.make).pipe(Layer.provide(Idempotency.layer))
}
