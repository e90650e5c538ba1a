/**
 * Apps as the API sees them (docs/contract.md#apps): create, list, get, update, delete. Every
 * operation is confined to the caller's org (another org's app is `not_found`); callers check
 * the `apps` scopes first.
 *
 * The API applies its changes to the app's controller itself, with the same pure transition the
 * actor runs (`Apps/Reconcile.ts`), under the app's row lock, with the operations it causes
 * written to the outbox and the audit entry in the same transaction: the answer shows what the
 * change did (`deploying`, `deleting`), and the change and the actor's own messages apply one at
 * a time, in one order.
 *
 * - Create checks the template (`base`, `debian` or a ready template of the org: 400 naming
 *   `template` otherwise), then in one transaction the org's usage limit (402
 *   `usage_limit_reached` while blocked), the name (409) and the insert; its first replicas are
 *   asked for at once. The env is sealed at rest (`app-env:<id>`). `Idempotency-Key` through
 *   @svc/db/Idempotency (operation `apps.create`).
 * - Update: 409 while the app is being deleted; a scale-up of a blocked org is 402. A `cmd` or
 *   an `env` that differs from the current one starts a rolling update; the same one changes
 *   nothing.
 * - Delete: the app goes `deleting` until its sandboxes are gone; a second delete answers the
 *   same. Once gone it is not found.
 * - Audit entries `app.created`, `app.updated`, `app.deleted` (target: the app's id).
 */
import * as Actors from "@svc/actors/Actors"
import { Audit, type AuditContext } from "@svc/auth/Audit"
import { SecretBox } from "@svc/crypto/SecretBox"
import { Idempotency, type Outcome } from "@svc/db/Idempotency"
import * as Rows from "@svc/db/Rows"
import { App, type AppList, type CreateAppRequest, type UpdateAppRequest } from "@svc/domain/App"
import * as Errors from "@svc/domain/Errors"
import { BASE_TEMPLATE_ID, CODE_TEMPLATE_ID, DEBIAN_TEMPLATE_ID, makeId, type OrgId } from "@svc/domain/Ids"
import { type ListQuery, pageInfo } from "@svc/domain/Pagination"
import * as Outbox from "@svc/events/Outbox"
import { wakeIfPresent } from "@svc/events/Relay"
import { UsageGate } from "@svc/sandboxes/Sandboxes/UsageGate"
import { Clock, Context, Effect, Layer, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { AppControllerState, AppMessage } from "./Apps/Model.ts"
import { envAad } from "./Apps/Operations.ts"
import * as Reconcile from "./Apps/Reconcile.ts"
import * as Store from "./Apps/Store.ts"

const notFound = () => new Errors.NotFound({ error: "App not found" })
const encodeApp = Schema.encodeSync(App)
const readyTemplates = Rows.decoder("Apps.template", Schema.Struct({ id: Schema.String }))
const EnvJson = Schema.fromJsonString(Schema.Record(Schema.String, Schema.String))

const sameEnv = (a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>) => {
  const keys = Object.keys(a)
  return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && a[k] === b[k])
}

const sameCmd = (a: ReadonlyArray<string>, b: ReadonlyArray<string>) =>
  a.length === b.length && a.every((x, i) => x === b[i])

type Failure = Rows.QueryError

export class Apps extends Context.Service<Apps, {
  readonly create: (
    orgId: OrgId,
    input: CreateAppRequest,
    idempotencyKey: string | undefined,
    audit: AuditContext
  ) => Effect.Effect<
    Outcome<App>,
    Errors.InvalidRequest | Errors.Conflict | Errors.UsageLimitReached | Errors.IdempotencyKeyReused | Failure
  >
  readonly list: (orgId: OrgId, query: ListQuery) => Effect.Effect<AppList, Failure>
  readonly get: (orgId: OrgId, id: string) => Effect.Effect<App, Errors.NotFound | Failure>
  readonly update: (
    orgId: OrgId,
    id: string,
    input: UpdateAppRequest,
    audit: AuditContext
  ) => Effect.Effect<App, Errors.NotFound | Errors.Conflict | Errors.UsageLimitReached | Failure>
  readonly remove: (orgId: OrgId, id: string, audit: AuditContext) => Effect.Effect<App, Errors.NotFound | Failure>
}>()("@svc/apps/Apps") {
  static readonly make = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const box = yield* SecretBox
    const idempotency = yield* Idempotency
    const audit = yield* Audit
    const usage = yield* UsageGate
    const withSql = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
      Effect.provideService(effect, SqlClient.SqlClient, sql)

    /** The transition's operations into the outbox, in the caller's transaction. */
    const record = (effects: Parameters<typeof Actors.toOutbox>[0], now: number) =>
      Effect.flatMap(
        Actors.toOutbox(effects, now).pipe(Effect.orDie),
        (messages) => Outbox.appendAll(messages).pipe(Effect.catchTag("InvalidOutboxMessage", Effect.die), withSql)
      )

    const templateExists = (orgId: OrgId, ref: string) =>
      Effect.gen(function*() {
        if (
          ref === "base" || ref === "debian" || ref === "code" || ref === BASE_TEMPLATE_ID ||
          ref === DEBIAN_TEMPLATE_ID || ref === CODE_TEMPLATE_ID
        ) return true
        const rows = yield* readyTemplates(sql`SELECT id FROM templates WHERE org_id = ${orgId}
          AND deleted_at IS NULL AND state = 'ready' AND (id = ${ref} OR name = ${ref}) LIMIT 1`)
        return rows.length > 0
      })

    const create = Effect.fn("Apps.create")(
      function*(orgId: OrgId, input: CreateAppRequest, idempotencyKey: string | undefined, context: AuditContext) {
        if (!(yield* templateExists(orgId, input.template))) {
          const message = `no ready template ${JSON.stringify(input.template)} in this org`
          return yield* new Errors.InvalidRequest({
            error: `Invalid request body: template ${message}`,
            issues: [{ path: "template", message }]
          })
        }
        const id = makeId("app")
        const sealedEnv = yield* box.seal(Schema.encodeSync(EnvJson)(input.env), envAad(id))
        const outcome = yield* idempotency.run({
          orgId,
          operation: "apps.create",
          key: idempotencyKey,
          request: input,
          response: encodeApp,
          create: Effect.gen(function*(): Effect.fn.Return<
            App,
            Errors.Conflict | Errors.UsageLimitReached | Failure,
            SqlClient.SqlClient
          > {
            // The org's row, as sandbox creates lock it: the usage gate reads under it.
            yield* sql`SELECT 1 FROM orgs WHERE id = ${orgId} FOR NO KEY UPDATE`
            yield* usage.admit(orgId)
            const now = yield* Clock.currentTimeMillis
            const first = Reconcile.start(
              Reconcile.initial({
                id,
                orgId,
                name: input.name,
                template: input.template,
                cmd: input.cmd,
                sealedEnv,
                exposedPorts: input.exposed_ports,
                replicas: input.replicas,
                now
              }),
              now
            )
            const inserted = yield* Store.store.save(id, first.state!, undefined).pipe(
              Effect.catchTag("CorruptState", Effect.die)
            )
            if (!inserted) return yield* new Errors.Conflict({ error: "The org already has an app with this name" })
            yield* record(first.effects, now)
            yield* audit.record(orgId, "app.created", id, context)
            return Store.toRecord(first.state!)
          }).pipe(withSql)
        })
        yield* wakeIfPresent
        return outcome
      }
    )

    const list = Effect.fn("Apps.list")(function*(orgId: OrgId, query: ListQuery) {
      const [states, total] = yield* withSql(Store.page(orgId, query.limit, query.offset))
      return { apps: states.map(Store.toRecord), ...pageInfo(query, states.length, total) } satisfies AppList
    })

    const get = Effect.fn("Apps.get")(function*(orgId: OrgId, id: string) {
      const found = yield* withSql(Store.find(orgId, id))
      if (Option.isNone(found)) return yield* notFound()
      return Store.toRecord(found.value.state)
    })

    /**
     * Locks the org's app, asks `decide` for the message (it may refuse; none: nothing to do),
     * applies the transition and writes its state, operations and audit entry.
     */
    const applyNow = <E>(
      orgId: OrgId,
      id: string,
      action: "app.updated" | "app.deleted",
      context: AuditContext,
      decide: (s: AppControllerState) => Effect.Effect<AppMessage | null, E, SqlClient.SqlClient>
    ) =>
      Effect.gen(function*() {
        const next = yield* sql.withTransaction(Effect.gen(function*() {
          const found = yield* withSql(Store.find(orgId, id, true))
          if (Option.isNone(found)) return yield* notFound()
          const { state, version } = found.value
          const message = yield* withSql(decide(state))
          if (message === null) return state
          const now = yield* Clock.currentTimeMillis
          const result = Reconcile.transition(state, message, { id, now, msgId: `api:${now}` })
          const after = result.state ?? state
          const saved = yield* withSql(Store.store.save(id, after, version)).pipe(
            Effect.catchTag("CorruptState", Effect.die)
          )
          // Impossible under the row lock; a defect if it happens.
          if (!saved) return yield* Effect.die(new Error(`app ${id}: version moved under the row lock`))
          yield* record(result.effects, now)
          yield* withSql(audit.record(orgId, action, id, context))
          return after
        }))
        yield* wakeIfPresent
        return Store.toRecord(next)
      })

    const update = Effect.fn("Apps.update")(
      function*(orgId: OrgId, id: string, input: UpdateAppRequest, context: AuditContext) {
        return yield* applyNow(orgId, id, "app.updated", context, (s) =>
          Effect.gen(function*() {
            if (s.phase !== "active") {
              return yield* new Errors.Conflict({ error: "This app is being deleted" })
            }
            if (input.replicas !== undefined && input.replicas > s.replicas) {
              yield* sql`SELECT 1 FROM orgs WHERE id = ${orgId} FOR NO KEY UPDATE`
              yield* usage.admit(orgId)
            }
            let sealedEnv: string | undefined
            if (input.env !== undefined) {
              const current = yield* box.open(s.sealedEnv, envAad(s.id)).pipe(
                Effect.flatMap((text) => Schema.decodeUnknownEffect(EnvJson)(text)),
                Effect.orDie
              )
              if (!sameEnv(current, input.env)) {
                sealedEnv = yield* box.seal(Schema.encodeSync(EnvJson)(input.env), envAad(s.id))
              }
            }
            return {
              _tag: "Update" as const,
              ...(input.replicas !== undefined ? { replicas: input.replicas } : {}),
              ...(input.cmd !== undefined && !sameCmd(input.cmd, s.cmd) ? { cmd: input.cmd } : {}),
              ...(sealedEnv !== undefined ? { sealedEnv } : {})
            }
          }))
      }
    )

    const remove = Effect.fn("Apps.remove")(function*(orgId: OrgId, id: string, context: AuditContext) {
      return yield* applyNow(
        orgId,
        id,
        "app.deleted",
        context,
        (s) => Effect.succeed(s.phase === "active" ? { _tag: "Delete" as const } : null)
      )
    })

    return Apps.of({ create, list, get, update, remove })
  })

  /** Needs SqlClient, SecretBox, Audit and UsageGate (@svc/billing's `Billing.gate`). */
  static readonly layer = Layer.effect(Apps, Apps.make).pipe(Layer.provide(Idempotency.layer))
}
