/**
 * Webhook subscriptions and their deliveries as the API sees them (docs/contract.md#webhooks).
 * Every operation is scoped to the caller's org: another org's webhook is
 * indistinguishable from a missing one.
 *
 * - create/update: the URL passes the syntax rule (domain) and the address guard (resolves now,
 *   every address public or operator-allowed); events are exact names or `*`; the secret is the
 *   caller's (16+ characters) or generated, and returned by create only. At most 20 live
 *   webhooks per org, counted under a per-org transaction lock, so concurrent creates cannot
 *   make a 21st. `Idempotency-Key` through @svc/db/Idempotency (operation `webhooks.create`).
 * - The `secret` column holds the secret sealed by SecretBox (AAD: the webhook id), never the
 *   plaintext; the dispatcher opens it for each attempt. There is no plaintext fallback: a
 *   value that is not sealed fails to open (SecretBoxError `malformed`).
 * - delete is soft: the row stays so that the jobs of its deliveries find it at their next
 *   retry and dead-letter; to the API it is gone.
 * - test and retry write their job to the transactional outbox with the delivery change, so a
 *   job is published if and only if the change commits (the outbox relay must run somewhere).
 * - Database failures pass through as they are (`SqlError`, or `RowDecodeError` for a row its
 *   schema refuses): the API answers them once for every route (503 `unavailable`, 500).
 */
import { SecretBox } from "@svc/crypto/SecretBox"
import { Idempotency, type Outcome } from "@svc/db/Idempotency"
import * as Rows from "@svc/db/Rows"
import {
  DeliveryNotRetryable,
  type IdempotencyKeyReused,
  type InvalidEventFilter,
  InvalidWebhookUrl,
  NotFound,
  WebhookLimitReached
} from "@svc/domain/Errors"
import { parseEventFilter } from "@svc/domain/Events"
import { makeId } from "@svc/domain/Ids"
import type { DeliveryId } from "@svc/domain/Ids"
import { type ListQuery, pageInfo } from "@svc/domain/Pagination"
import {
  type CreatedWebhook,
  CreatedWebhook as CreatedWebhookSchema,
  type CreateWebhookRequest,
  DeliveryAttempt,
  type DeliveryList,
  DeliveryStatus,
  type ListDeliveriesQuery,
  MAX_WEBHOOKS_PER_ORG,
  parseWebhookUrl,
  type PatchWebhookRequest,
  Webhook,
  type WebhookList
} from "@svc/domain/Webhook"
import * as Outbox from "@svc/events/Outbox"
import { Clock, Context, DateTime, Duration, Effect, Layer, Option, Result, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { ensureDeliveryStream, jobSubject, WEBHOOKS_CHANNEL } from "../Delivery/Jobs.ts"
import { generateSecret } from "../Delivery/Signature.ts"
import { WebhookAddressGuard } from "./AddressGuard.ts"

/** A row of `webhooks`: the record's fields, times as stored. */
const WebhookRow = Schema.Struct({
  id: Webhook.fields.id,
  url: Webhook.fields.url,
  events: Webhook.fields.events,
  enabled: Webhook.fields.enabled,
  created_at: Rows.Timestamptz,
  updated_at: Rows.Timestamptz
})

const toWebhook = (row: typeof WebhookRow.Type): Webhook => ({
  id: row.id,
  url: row.url,
  events: row.events,
  enabled: row.enabled,
  createdAt: DateTime.fromDateUnsafe(row.created_at),
  updatedAt: DateTime.fromDateUnsafe(row.updated_at)
})

/** A row of `webhook_attempts` with its delivery's event: the record's fields, times as stored. */
const { createdAt: _createdAt, ...attemptFields } = DeliveryAttempt.fields
const AttemptRow = Schema.Struct({
  ...attemptFields,
  created_at: Rows.Timestamptz,
  next_attempt_at: Schema.NullOr(Rows.Timestamptz)
})

const toAttempt = ({ created_at, next_attempt_at, ...row }: typeof AttemptRow.Type): DeliveryAttempt => ({
  ...row,
  createdAt: DateTime.fromDateUnsafe(created_at),
  next_attempt_at: next_attempt_at === null ? null : DateTime.fromDateUnsafe(next_attempt_at)
})

const Count = Schema.Struct({ n: Schema.Int })
const countOf = (counted: Option.Option<typeof Count.Type>) =>
  Option.match(counted, { onNone: () => 0, onSome: (c) => c.n })

const notFound = () => new NotFound({ error: "No such webhook" })

const encodeCreated = Schema.encodeSync(CreatedWebhookSchema)

export class Webhooks extends Context.Service<Webhooks, {
  /**
   * With `idempotencyKey`: the same key and request within 24 h replay the first answer
   * (`Replayed`, its JSON as sent); another request with the key is 422.
   */
  readonly create: (
    orgId: string,
    input: CreateWebhookRequest,
    idempotencyKey?: string
  ) => Effect.Effect<
    Outcome<CreatedWebhook>,
    InvalidWebhookUrl | InvalidEventFilter | WebhookLimitReached | IdempotencyKeyReused | Rows.QueryError
  >
  readonly list: (orgId: string, query: ListQuery) => Effect.Effect<WebhookList, Rows.QueryError>
  readonly get: (orgId: string, id: string) => Effect.Effect<Webhook, NotFound | Rows.QueryError>
  readonly update: (
    orgId: string,
    id: string,
    patch: PatchWebhookRequest
  ) => Effect.Effect<Webhook, NotFound | InvalidWebhookUrl | InvalidEventFilter | Rows.QueryError>
  readonly remove: (orgId: string, id: string) => Effect.Effect<void, NotFound | Rows.QueryError>
  /** Sends a `ping` through the real delivery path; returns its delivery id. */
  readonly test: (
    orgId: string,
    id: string
  ) => Effect.Effect<{ readonly delivery_id: DeliveryId }, NotFound | Rows.QueryError>
  readonly deliveries: (
    orgId: string,
    id: string,
    query: ListDeliveriesQuery
  ) => Effect.Effect<DeliveryList, NotFound | Rows.QueryError>
  readonly retry: (
    orgId: string,
    id: string,
    deliveryId: string
  ) => Effect.Effect<
    { readonly delivery_id: DeliveryId; readonly status: "retried" },
    NotFound | DeliveryNotRetryable | Rows.QueryError
  >
}>()("@svc/webhooks/Subscriptions/Webhooks") {
  static readonly make = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const guard = yield* WebhookAddressGuard
    const box = yield* SecretBox
    const idempotency = yield* Idempotency
    const provideSql = Effect.provideService(SqlClient.SqlClient, sql)
    // The relay publishes test and retry jobs into this stream: make sure it exists, without
    // holding up the API's start while NATS is away (the relay retries until it is there).
    yield* Effect.forkScoped(ensureDeliveryStream.pipe(
      Effect.tapError((e) =>
        Effect.logWarning("webhooks: delivery stream not ensured yet, retrying", { error: String(e) })
      ),
      Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(200)), Schedule.spaced(Duration.seconds(5))]))
    ))

    const checkUrl = Effect.fn("Webhooks.checkUrl")(function*(url: string) {
      const parsed = parseWebhookUrl(url)
      if (Result.isFailure(parsed)) return yield* parsed.failure
      return yield* guard.checkUrl(url).pipe(
        Effect.map((checked) => checked.url),
        Effect.mapError((refused) => new InvalidWebhookUrl({ error: `Invalid webhook url: ${refused.message}` }))
      )
    })

    const checkEvents = (events: ReadonlyArray<string>) => Effect.fromResult(parseEventFilter(events))

    const OrgAndId = Schema.Struct({ orgId: Schema.String, id: Schema.String })
    const live = Rows.findOneOption("Webhooks.findLive", {
      Request: OrgAndId,
      Result: WebhookRow,
      execute: ({ id, orgId }) =>
        sql`SELECT id, url, events, enabled, created_at, updated_at FROM webhooks
          WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL`
    })
    const liveLocked = Rows.findOneOption("Webhooks.findLive", {
      Request: OrgAndId,
      Result: WebhookRow,
      execute: ({ id, orgId }) =>
        sql`SELECT id, url, events, enabled, created_at, updated_at FROM webhooks
          WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL FOR UPDATE`
    })
    const countLive = Rows.findOneOption("Webhooks.countLive", {
      Request: Schema.String,
      Result: Count,
      execute: (orgId) => sql`SELECT count(*)::int AS n FROM webhooks WHERE org_id = ${orgId} AND deleted_at IS NULL`
    })
    const page = Rows.findAll("Webhooks.list", {
      Request: Schema.Struct({ orgId: Schema.String, limit: Schema.Number, offset: Schema.Number }),
      Result: WebhookRow,
      execute: ({ limit, offset, orgId }) =>
        sql`SELECT id, url, events, enabled, created_at, updated_at FROM webhooks
          WHERE org_id = ${orgId} AND deleted_at IS NULL
          ORDER BY created_at DESC, id DESC LIMIT ${limit}::int OFFSET ${offset}::int`
    })
    const inserted = Rows.decoder("Webhooks.create", WebhookRow)
    const updated = Rows.decoder("Webhooks.update", WebhookRow)
    const AttemptFilter = { id: Schema.String, status: Schema.NullOr(Schema.String) }
    const attempts = Rows.findAll("Webhooks.deliveries", {
      Request: Schema.Struct({ ...AttemptFilter, limit: Schema.Number, offset: Schema.Number }),
      Result: AttemptRow,
      execute: ({ id, limit, offset, status }) =>
        sql`
          SELECT a.id, a.delivery_id, d.event, a.attempt, a.status, a.response_code, a.error, a.duration_ms,
                 a.created_at, a.next_attempt_at
          FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
          WHERE a.webhook_id = ${id} AND (${status}::text IS NULL OR a.status = ${status}::text)
          ORDER BY a.created_at DESC, a.id DESC LIMIT ${limit}::int OFFSET ${offset}::int`
    })
    const countAttempts = Rows.findOneOption("Webhooks.countDeliveries", {
      Request: Schema.Struct(AttemptFilter),
      Result: Count,
      execute: ({ id, status }) =>
        sql`
          SELECT count(*)::int AS n FROM webhook_attempts
          WHERE webhook_id = ${id} AND (${status}::text IS NULL OR status = ${status}::text)`
    })
    const retriable = Rows.findOneOption("Webhooks.retry", {
      Request: Schema.Struct({ orgId: Schema.String, id: Schema.String, deliveryId: Schema.String }),
      Result: Schema.Struct({ status: DeliveryStatus, round: Schema.Int }),
      execute: ({ deliveryId, id, orgId }) =>
        sql`
          SELECT d.status, d.round FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
          WHERE d.id = ${deliveryId} AND d.webhook_id = ${id} AND w.org_id = ${orgId} AND w.deleted_at IS NULL
          FOR UPDATE OF d`
    })

    /** The live webhook row of the org, locked for the transaction when `lock`. */
    const findLive = (orgId: string, id: string, lock = false) =>
      Effect.flatMap(
        (lock ? liveLocked : live)({ orgId, id }),
        Option.match({ onNone: () => Effect.fail(notFound()), onSome: Effect.succeed })
      )

    const create = Effect.fn("Webhooks.create")(
      function*(orgId: string, input: CreateWebhookRequest, idempotencyKey?: string) {
        const url = yield* checkUrl(input.url)
        const events = yield* checkEvents(input.events)
        const secret = input.secret ?? generateSecret()
        const id = makeId("webhook")
        // Bound to its row: a sealed secret copied to another webhook does not open.
        const sealedSecret = yield* box.seal(secret, id)
        return yield* idempotency.run({
          orgId,
          operation: "webhooks.create",
          key: idempotencyKey,
          request: input,
          response: (created: CreatedWebhook) => encodeCreated(created),
          create: Effect.gen(function*(): Effect.fn.Return<CreatedWebhook, WebhookLimitReached | Rows.QueryError> {
            // One creator per org at a time: the count below cannot go stale before the insert.
            yield* sql`SELECT pg_advisory_xact_lock(hashtextextended(${`webhooks:${orgId}`}, 0))`
            if (countOf(yield* countLive(orgId)) >= MAX_WEBHOOKS_PER_ORG) {
              return yield* new WebhookLimitReached({
                error: `An org may have at most ${MAX_WEBHOOKS_PER_ORG} webhooks`
              })
            }
            const [row] = yield* inserted(sql`
            INSERT INTO webhooks (id, org_id, url, events, secret, enabled)
            VALUES (${id}, ${orgId}, ${url}, ${events}::text[], ${sealedSecret}, ${input.enabled})
            RETURNING id, url, events, enabled, created_at, updated_at`)
            yield* sql`SELECT pg_notify(${WEBHOOKS_CHANNEL}, ${id})`
            return { ...toWebhook(row!), secret_returned_once: secret }
          })
        })
      }
    )

    const list = Effect.fn("Webhooks.list")(function*(orgId: string, query: ListQuery) {
      const [rows, count] = yield* Effect.all([
        page({ orgId, limit: query.limit, offset: query.offset }),
        countLive(orgId)
      ], { concurrency: 2 })
      return { webhooks: rows.map(toWebhook), ...pageInfo(query, rows.length, countOf(count)) } satisfies WebhookList
    })

    const get = Effect.fn("Webhooks.get")(function*(orgId: string, id: string) {
      return toWebhook(yield* findLive(orgId, id))
    })

    const update = Effect.fn("Webhooks.update")(function*(orgId: string, id: string, patch: PatchWebhookRequest) {
      // Validate before touching the row; a missing webhook still answers 404 first.
      yield* findLive(orgId, id)
      const url = patch.url === undefined ? null : yield* checkUrl(patch.url)
      const events = patch.events === undefined ? null : yield* checkEvents(patch.events)
      const enabled = patch.enabled ?? null
      const rows = yield* sql.withTransaction(Effect.gen(function*() {
        const rows = yield* updated(sql`
          UPDATE webhooks SET
            url = COALESCE(${url}::text, url),
            events = COALESCE(${events}::text[], events),
            enabled = COALESCE(${enabled}::boolean, enabled),
            updated_at = now()
          WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL
          RETURNING id, url, events, enabled, created_at, updated_at`)
        // Dispatchers keep each live webhook's url and state in memory for first attempts.
        if (rows.length > 0) yield* sql`SELECT pg_notify(${WEBHOOKS_CHANNEL}, ${id})`
        return rows
      }))
      if (rows[0] === undefined) return yield* notFound()
      return toWebhook(rows[0])
    })

    const remove = Effect.fn("Webhooks.remove")(function*(orgId: string, id: string) {
      const rows = yield* sql.withTransaction(Effect.gen(function*() {
        const rows = yield* sql`
          UPDATE webhooks SET deleted_at = now(), enabled = false, updated_at = now()
          WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL RETURNING id`
        if (rows.length > 0) yield* sql`SELECT pg_notify(${WEBHOOKS_CHANNEL}, ${id})`
        return rows
      }))
      if (rows.length === 0) return yield* notFound()
    })

    const test = Effect.fn("Webhooks.test")(function*(orgId: string, id: string) {
      const deliveryId = makeId("delivery") as DeliveryId
      const now = yield* Clock.currentTimeMillis
      const body = JSON.stringify({
        event: "ping",
        org_id: orgId,
        ts: new Date(now).toISOString(),
        data: { webhook_id: id, message: "Test delivery from the webhook test operation" }
      })
      const job = yield* Outbox.prepare({
        subject: jobSubject(id, deliveryId),
        payload: { delivery_id: deliveryId, round: 1 }
      })
        .pipe(Effect.orDie)
      // One statement, so one round trip (a transaction took five: BEGIN, the locked check, two
      // inserts, COMMIT; bench/webhooks.ts): the webhook row locked so that a concurrent delete
      // cannot slip between the check and the insert, the delivery and its job's outbox row
      // committed together, or nothing when the webhook is not live.
      const queued = yield* sql`
        WITH hook AS (
          SELECT id FROM webhooks WHERE id = ${id} AND org_id = ${orgId} AND deleted_at IS NULL FOR SHARE
        ), delivery AS (
          INSERT INTO webhook_deliveries (id, webhook_id, org_id, event, event_msg_id, body, status)
          SELECT ${deliveryId}, hook.id, ${orgId}, 'ping', ${`ping:${deliveryId}`}, ${body}, 'pending' FROM hook
          RETURNING id
        ), queued AS (${Outbox.insertFrom(sql, job, "delivery")})
        SELECT id FROM queued`
      if (queued.length === 0) return yield* notFound()
      return { delivery_id: deliveryId }
    })

    const deliveries = Effect.fn("Webhooks.deliveries")(
      function*(orgId: string, id: string, query: ListDeliveriesQuery) {
        yield* findLive(orgId, id)
        const status = query.status ?? null
        // One snapshot for the page and its total: attempts change state while a client reads.
        const [rows, count] = yield* sql.withTransaction(
          Effect.all([
            sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`,
            attempts({ id, status, limit: query.limit, offset: query.offset }),
            countAttempts({ id, status })
          ]).pipe(Effect.map(([, rows, count]) => [rows, count] as const))
        )
        return {
          deliveries: rows.map(toAttempt),
          ...pageInfo(query, rows.length, countOf(count))
        } satisfies DeliveryList
      }
    )

    const retry = Effect.fn("Webhooks.retry")(function*(orgId: string, id: string, deliveryId: string) {
      yield* sql.withTransaction(Effect.gen(function*() {
        const found = yield* retriable({ orgId, id, deliveryId })
        if (Option.isNone(found)) return yield* new NotFound({ error: "No such delivery" })
        const delivery = found.value
        if (delivery.status !== "failed" && delivery.status !== "dead_letter") {
          return yield* new DeliveryNotRetryable({
            error: `Only failed or dead_letter deliveries can be retried; this one is ${delivery.status}`
          })
        }
        // The row that carried the delivery's state is revived; the attempt counter restarts
        // with a new round (the old round's job, if still waiting, is stale when it comes back).
        yield* sql`
          UPDATE webhook_attempts SET status = 'retried', next_attempt_at = now()
          WHERE delivery_id = ${deliveryId} AND round = ${delivery.round}::int AND status IN ('failed', 'dead_letter')
            AND attempt = (SELECT max(attempt) FROM webhook_attempts WHERE delivery_id = ${deliveryId} AND round = ${delivery.round}::int)`
        const round = delivery.round + 1
        // A new round is carried by a new job (its own stream sequence).
        yield* sql`UPDATE webhook_deliveries SET round = ${round}::int, status = 'pending', job_seq = NULL, updated_at = now() WHERE id = ${deliveryId}`
        yield* Outbox.append({ subject: jobSubject(id, deliveryId), payload: { delivery_id: deliveryId, round } }).pipe(
          Effect.orDie,
          provideSql
        )
      }))
      return { delivery_id: deliveryId as DeliveryId, status: "retried" as const }
    })

    return Webhooks.of({ create, list, get, update, remove, test, deliveries, retry })
  })

  /** Needs SqlClient, Nats (the delivery stream), a WebhookAddressGuard and the SecretBox. */
  static readonly layer = Layer.effect(Webhooks)(Webhooks.make).pipe(Layer.provide(Idempotency.layer))
}
