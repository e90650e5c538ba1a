/**
 * The transactional outbox: a state change and the messages it causes are written in one
 * transaction; `OutboxRelay` (Relay.ts) publishes them to JetStream afterwards. Nothing is lost
 * when a process dies between commit and publish, and nothing is published for a transaction
 * that rolls back.
 *
 * Call `append` / `appendEvent` inside the caller's `sql.withTransaction(...)`: they run on the
 * ambient transaction's connection. Subjects are stored without the process's NATS prefix; the
 * relay adds it when publishing. Each row's id (time-sortable, `obx_<ulid>`) becomes the
 * message's `Nats-Msg-Id`, so a republished row is dropped by the stream as a duplicate. The
 * writer's span (its `traceparent`, when spans are exported) is stored with the row and sent as
 * the message's header, so the consumer continues the writer's trace.
 */
import { jsonCodec, type JsonSchema } from "@svc/bus/Codec"
import * as Trace from "@svc/bus/Trace"
import { makeBody } from "@svc/domain/Ids"
import { Clock, Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"

/** Postgres channel the relay listens on; `append` notifies it (delivered at commit). */
export const NOTIFY_CHANNEL = "svc_outbox"

export class InvalidOutboxMessage extends Schema.TaggedError<InvalidOutboxMessage>()("InvalidOutboxMessage", {
  subject: Schema.String,
  message: Schema.String
}) {}

export interface OutboxMessage {
  /** Subject relative to the NATS prefix: tokens (`["evt", orgId, "sandbox.created"]`) or dotted. */
  readonly subject: string | ReadonlyArray<string>
  /** Any JSON value; published as its JSON text. */
  readonly payload: unknown
  /**
   * A KV operation instead of a message (`kvPut`, `kvDelete`): `subject` is then
   * `<bucket>.<key>`, the bucket's base name (the relay adds the prefix to the bucket's name).
   */
  readonly kv?: "put" | "del" | undefined
}

/**
 * Puts `value` (its JSON text) under `key` of the KV bucket `bucket` (base name) once the
 * transaction commits. Puts and deletes of one key reach the bucket in commit order when the
 * writers serialise on the row the entry describes (its lock), as every outbox row of one entity does.
 */
export const kvPut = (bucket: string, key: string, value: unknown): OutboxMessage => ({
  subject: `${bucket}.${key}`,
  payload: value,
  kv: "put"
})

/** Deletes `key` of the KV bucket `bucket` (base name) once the transaction commits. */
export const kvDelete = (bucket: string, key: string): OutboxMessage => ({
  subject: `${bucket}.${key}`,
  payload: null,
  kv: "del"
})

/** A row that will be published: its id is also the `Nats-Msg-Id`. */
export interface OutboxRow {
  readonly id: string
  readonly subject: string
}

// A NATS subject token: no separators, wildcards or whitespace. Kept to a plain alphabet so that
// untrusted ids cannot smuggle wildcards into a subject.
const TOKEN = /^[A-Za-z0-9_-]+$/
const MAX_SUBJECT = 255

/** Joins and checks subject tokens (each may itself be dotted, e.g. an event name). */
export const subjectOf = (subject: string | ReadonlyArray<string>): Effect.Effect<string, InvalidOutboxMessage> => {
  const joined = typeof subject === "string" ? subject : subject.join(".")
  const tokens = joined.split(".")
  if (joined.length > MAX_SUBJECT) {
    return Effect.fail(new InvalidOutboxMessage({ subject: joined.slice(0, 64), message: "subject too long" }))
  }
  const bad = tokens.find((t) => !TOKEN.test(t))
  return bad === undefined
    ? Effect.succeed(joined)
    : Effect.fail(
      new InvalidOutboxMessage({ subject: joined, message: `invalid subject token ${JSON.stringify(bad)}` })
    )
}

const jsonText = (subject: string, payload: unknown): Effect.Effect<string, InvalidOutboxMessage> =>
  Effect.try({
    try: () => {
      const text = JSON.stringify(payload)
      if (typeof text !== "string") throw new Error("payload is not representable as JSON")
      return text
    },
    catch: (cause) => new InvalidOutboxMessage({ subject, message: `payload: ${String(cause)}` })
  })

/** A new outbox row id: time-sortable, unique (same body format as the domain ids). */
export const makeOutboxId = (nowMs: number): string => `obx_${makeBody(nowMs)}`

/**
 * Appends messages to the outbox, in order, inside the ambient transaction (or on its own
 * when there is none). Returns the rows (their ids are the future `Nats-Msg-Id`s).
 */
export const appendAll = Effect.fn("Outbox.appendAll")(function*(messages: ReadonlyArray<OutboxMessage>) {
  if (messages.length === 0) return [] as ReadonlyArray<OutboxRow>
  const sql = yield* SqlClient.SqlClient
  const now = yield* Clock.currentTimeMillis
  const ids: Array<string> = []
  const subjects: Array<string> = []
  const payloads: Array<string> = []
  // '' for a message: the driver cannot type an array of nulls alone.
  const kvs: Array<string> = []
  for (const m of messages) {
    const subject = yield* subjectOf(m.subject)
    if (m.kv !== undefined && !subject.includes(".")) {
      return yield* new InvalidOutboxMessage({ subject, message: "a KV operation's subject is <bucket>.<key>" })
    }
    payloads.push(yield* jsonText(subject, m.payload))
    subjects.push(subject)
    kvs.push(m.kv ?? "")
    ids.push(makeOutboxId(now))
  }
  // The writer's span, which the relay sends along (Trace.ts): NULL without an exporter.
  const trace = (yield* Trace.current) ?? null
  // One statement: the rows in the given order (seq follows ordinality) and the wake-up of the
  // relays, which Postgres delivers only if and when the transaction commits.
  yield* sql`
    INSERT INTO outbox (id, subject, payload, kv, trace)
    SELECT r.id, r.subject, r.payload::json, NULLIF(r.kv, ''), ${trace}::text
    FROM unnest(${ids}::text[], ${subjects}::text[], ${payloads}::text[], ${kvs}::text[])
           WITH ORDINALITY AS r(id, subject, payload, kv, n),
         (SELECT pg_notify(${NOTIFY_CHANNEL}, '')) AS wake
    ORDER BY r.n
  `
  return ids.map((id, i) => ({ id, subject: subjects[i]! })) as ReadonlyArray<OutboxRow>
})

/** A message checked and given its row id, ready to be inserted by `insertFrom`. */
export interface PreparedMessage {
  readonly id: string
  readonly subject: string
  readonly payload: string
  readonly kv: string | null
}

/** Checks a message (subject, JSON payload) and gives it its row id, as `appendAll` does. */
export const prepare = (message: OutboxMessage): Effect.Effect<PreparedMessage, InvalidOutboxMessage> =>
  Effect.flatMap(subjectOf(message.subject), (subject) => {
    if (message.kv !== undefined && !subject.includes(".")) {
      return Effect.fail(new InvalidOutboxMessage({ subject, message: "a KV operation's subject is <bucket>.<key>" }))
    }
    return Effect.flatMap(
      Clock.currentTimeMillis,
      (now) =>
        Effect.map(jsonText(subject, message.payload), (payload) => ({
          id: makeOutboxId(now),
          subject,
          payload,
          kv: message.kv ?? null
        }))
    )
  })

/**
 * The INSERT of a prepared message as one step of a larger statement: for a data-modifying CTE
 * (`WITH changed AS (UPDATE ... RETURNING ...), queued AS (${insertFrom(sql, row, "changed")})`),
 * the row inserted once per row of the CTE `from` (none when the change did not happen). A
 * statement commits all of its steps or none, as a transaction would, in one round trip instead of
 * a transaction's four or more: the outbox's guarantee (the message exactly when the state
 * changed) in one statement. Returns the row's `id`. Wakes the relays like `appendAll`.
 */
export const insertFrom = (sql: SqlClient.SqlClient, row: PreparedMessage, from: string) =>
  sql`INSERT INTO outbox (id, subject, payload, kv)
    SELECT ${row.id}, ${row.subject}, ${row.payload}::json, ${row.kv}::text
    FROM ${sql(from)}, (SELECT pg_notify(${NOTIFY_CHANNEL}, '')) AS wake
    RETURNING id`

/**
 * Checks messages and gives them their row ids, as `appendAll` does, for `insertAllFrom`.
 */
export const prepareAll = (
  messages: ReadonlyArray<OutboxMessage>
): Effect.Effect<ReadonlyArray<PreparedMessage>, InvalidOutboxMessage> => Effect.forEach(messages, prepare)

/**
 * `insertFrom` for several rows, in the given order (`seq` follows it, as in `appendAll`), with
 * the writer's `traceparent` (`Trace.current`, null without an exporter): the rows are inserted
 * when the CTE `from` has a row (once, whatever its row count), none otherwise. Wakes the relays.
 */
export const insertAllFrom = (
  sql: SqlClient.SqlClient,
  rows: ReadonlyArray<PreparedMessage>,
  from: string,
  trace: string | null
) =>
  sql`INSERT INTO outbox (id, subject, payload, kv, trace)
    SELECT r.id, r.subject, r.payload::json, NULLIF(r.kv, ''), ${trace}::text
    FROM unnest(${rows.map((r) => r.id)}::text[], ${rows.map((r) => r.subject)}::text[],
                ${rows.map((r) => r.payload)}::text[], ${rows.map((r) => r.kv ?? "")}::text[])
           WITH ORDINALITY AS r(id, subject, payload, kv, n),
         (SELECT pg_notify(${NOTIFY_CHANNEL}, '')) AS wake
    WHERE EXISTS (SELECT 1 FROM ${sql(from)})
    ORDER BY r.n`

/** Appends one message; see `appendAll`. */
export const append = Effect.fn("Outbox.append")(function*(message: OutboxMessage) {
  const rows = yield* appendAll([message])
  return rows[0]!
})

// ---------------------------------------------------------------------------------------------
// Domain events: the envelope of docs/contract.md#envelope on subject `evt.<orgId>.<event>`.

/** The event envelope (docs/contract.md#envelope): `ts` is ISO 8601 UTC with milliseconds. */
export const Envelope = Schema.Struct({
  event: Schema.String,
  org_id: Schema.String,
  ts: Schema.String,
  data: Schema.Record(Schema.String, Schema.Json)
})
export type Envelope = typeof Envelope.Type

// Event names are lowercase dotted words (`sandbox.state_updated`); `*` is a subscription
// pattern, never an event.
const EVENT_NAME = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$/

export interface DomainEvent {
  readonly event: string
  readonly orgId: string
  /** The event's fields, already in their JSON form. */
  readonly data: { readonly [key: string]: unknown }
}

/** The subject tokens of a domain event: `evt.<orgId>.<event>`. */
export const eventSubject = (orgId: string, event: string): ReadonlyArray<string> => ["evt", orgId, event]

/** Builds the envelope of an event at time `nowMs`, checking the name and the org id token. */
export const makeEnvelope = (event: DomainEvent, nowMs: number): Effect.Effect<Envelope, InvalidOutboxMessage> => {
  const subject = `evt.${event.orgId}.${event.event}`
  if (!EVENT_NAME.test(event.event)) {
    return Effect.fail(
      new InvalidOutboxMessage({ subject, message: `invalid event name ${JSON.stringify(event.event)}` })
    )
  }
  if (!TOKEN.test(event.orgId)) {
    return Effect.fail(new InvalidOutboxMessage({ subject, message: `invalid org id ${JSON.stringify(event.orgId)}` }))
  }
  if (typeof event.data !== "object" || event.data === null || Array.isArray(event.data)) {
    return Effect.fail(new InvalidOutboxMessage({ subject, message: "event data must be an object" }))
  }
  return Effect.succeed({
    event: event.event,
    org_id: event.orgId,
    ts: new Date(nowMs).toISOString(),
    data: event.data as Envelope["data"]
  })
}

/** The outbox message of a domain event (envelope stamped with the Effect clock). */
export const eventMessage = Effect.fn("Outbox.eventMessage")(function*(event: DomainEvent) {
  const envelope = yield* makeEnvelope(event, yield* Clock.currentTimeMillis)
  return { subject: eventSubject(event.orgId, event.event), payload: envelope } satisfies OutboxMessage
})

/** Appends domain events (inside the caller's transaction). */
export const appendEvents = Effect.fn("Outbox.appendEvents")(function*(events: ReadonlyArray<DomainEvent>) {
  const messages: Array<OutboxMessage> = []
  for (const e of events) messages.push(yield* eventMessage(e))
  return yield* appendAll(messages)
})

/** Appends one domain event (inside the caller's transaction). */
export const appendEvent = Effect.fn("Outbox.appendEvent")(function*(event: DomainEvent) {
  const rows = yield* appendEvents([event])
  return rows[0]!
})

/**
 * A typed event: its data Schema encodes the fields to JSON before they are written, so an
 * event never carries a shape its consumers cannot decode.
 *
 *   const SandboxDeleted = Outbox.defineEvent("sandbox.deleted", Schema.Struct({ sandbox_id: ..., host_id: ... }))
 *   yield* SandboxDeleted.append(orgId, { sandbox_id, host_id })
 */
export const defineEvent = <S extends JsonSchema>(event: string, data: S) => {
  const encode = jsonCodec(data).encodeValue
  const toDomainEvent = (orgId: string, value: S["Type"]) =>
    Effect.map(
      Effect.mapError(
        encode(value),
        (e) => new InvalidOutboxMessage({ subject: `evt.${orgId}.${event}`, message: e.message })
      ),
      (encoded): DomainEvent => ({ event, orgId, data: encoded as DomainEvent["data"] })
    )
  return {
    event,
    data,
    /** The envelope of this event, for consumers decoding it. */
    envelope: Schema.Struct({ event: Schema.Literal(event), org_id: Schema.String, ts: Schema.String, data }),
    toDomainEvent,
    append: (orgId: string, value: S["Type"]) => Effect.flatMap(toDomainEvent(orgId, value), appendEvent)
  }
}
