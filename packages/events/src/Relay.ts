/**
 * The outbox relay: a background fiber that publishes unsent outbox rows to JetStream, in `seq`
 * order, with `Nats-Msg-Id` = row id, and marks them sent.
 *
 * Order: rows of one transaction, and of transactions that follow one another (one entity's,
 * serialised by its row lock or CAS), reach the stream in order. Rows of concurrent
 * transactions follow commit order, which may differ from `seq` order (a sequence value is drawn
 * before its transaction commits).
 *
 * - Several relays: one leads, holding a session advisory lock on a connection of its own; the
 *   others wait for it (trying again at every wake-up), so one relay publishes at a time and
 *   order holds (SKIP LOCKED would let two relays publish disjoint batches concurrently and
 *   interleave them). If the leader's connection dies, Postgres drops the lock and another leads.
 * - One statement per batch: it marks the batch published before as sent and reads the next, so
 *   a batch costs one round trip to Postgres (two when it is the last: the mark finds nothing
 *   new). No transaction is held while publishing.
 * - Exactly once in the stream: rows are marked sent only after their publishes were
 *   acknowledged. A leader that dies in between leaves them unsent; the next leader republishes
 *   them with the same msgID and the stream drops the duplicates (within its duplicate window,
 *   10 min for EVENTS).
 * - Latency: `Outbox.append` issues `pg_notify` in the writing transaction; the relay LISTENs and
 *   wakes at commit. Writers in the relay's own process also call `wake` after their commit (the
 *   API's services, the actor runtime), which is often sooner. A poll (`pollInterval`) covers
 *   notifications missed while reconnecting.
 * - Failures: a publish that fails (NATS down) leaves the batch unsent and is retried with capped
 *   exponential backoff; a statement that fails (Postgres down) ends the leadership, and the
 *   relay starts over after a backoff. The fiber never ends on its own.
 * - KV operations (`Outbox.kvPut` / `kvDelete`) are rows like the others, in the same order: a
 *   publish to the bucket's `$KV.<bucket>.<key>` subject (a delete with `KV-Operation: DEL`).
 *   The bucket must exist (its owner ensures it at start); until it does, the batch is retried.
 * - Trace context: a row's `trace` (the writer's `traceparent`) is sent as the message's header;
 *   the relay adds no span of its own to the chain.
 * - Publishes within a batch are sequential: a failed publish stops the batch, so the stream
 *   never holds a later row before an earlier one.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { BusError, Nats } from "@svc/bus/Nats"
import * as Rows from "@svc/db/Rows"
import { Context, Duration, Effect, Layer, Option, Queue, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { NOTIFY_CHANNEL, type OutboxRow } from "./Outbox.ts"

export interface RelayOptions {
  /** Rows per transaction (default 200). */
  readonly batchSize?: number
  /** Safety-net poll when no notification arrives (default 1 s). */
  readonly pollInterval?: Duration.Input
  /** How long a publish waits for the stream's ack (default 5 s). */
  readonly publishTimeoutMs?: number
  /** Sent rows are deleted after this long (default 24 h). */
  readonly retention?: Duration.Input
  /** Longest wait between retries after a failure (default 5 s). */
  readonly maxBackoff?: Duration.Input
  /**
   * Test hook, run after a batch is published and before it is marked sent. Lets a test kill
   * the relay at the worst moment.
   */
  readonly afterPublish?: (rows: ReadonlyArray<OutboxRow>) => Effect.Effect<void>
}

// Any fixed 64-bit key: the relays' leader lock.
const RELAY_LOCK_KEY = 0x5356_0b0c

const encoder = new TextEncoder()

const lockRows = Rows.decoder("OutboxRelay.lock", Schema.Struct({ locked: Schema.Boolean }))
/** A batch of the outbox, the payload as JSON text (published as it is). */
const OutboxBatchRow = Schema.Struct({
  id: Schema.String,
  subject: Schema.String,
  payload: Schema.String,
  /** NULL: a message; `put` / `del`: a KV operation on `<bucket>.<key>` (Outbox.kvPut). */
  kv: Schema.NullOr(Schema.Literals(["put", "del"])),
  /** The writer's `traceparent` (NULL: none), sent as the message's header. */
  trace: Schema.NullOr(Schema.String)
})
const outboxRows = Rows.decoder("OutboxRelay.batch", OutboxBatchRow)
const countRows = Rows.decoder("OutboxRelay.pending", Schema.Struct({ n: Schema.Int }))

export class OutboxRelay extends Context.Service<OutboxRelay, {
  /**
   * Asks the relay to look for rows now (in-process writers may call it after commit), and
   * yields so that it starts before the caller goes on.
   */
  readonly wake: Effect.Effect<void>
  /** Number of rows not yet sent. */
  readonly pending: Effect.Effect<number, BusError>
}>()("@svc/events/OutboxRelay") {
  static readonly make = Effect.fn("OutboxRelay.make")(function*(options: RelayOptions = {}) {
    const sql = yield* SqlClient.SqlClient
    const pg = yield* PgClient.PgClient
    const nats = yield* Nats
    const batchSize = options.batchSize ?? 200
    const pollInterval = Duration.fromInputUnsafe(options.pollInterval ?? Duration.seconds(1))
    const publishTimeout = options.publishTimeoutMs ?? 5_000
    const retention = Duration.fromInputUnsafe(options.retention ?? Duration.hours(24))
    const maxBackoffMs = Duration.toMillis(Duration.fromInputUnsafe(options.maxBackoff ?? Duration.seconds(5)))

    const wakeups = yield* Queue.sliding<void>(1)
    // Then yields: the relay's fiber sends its statement before the caller carries on (the
    // caller's own work, e.g. an HTTP response, came first and held the hop ~0.5 ms).
    const wake = Effect.andThen(Queue.offer(wakeups, undefined), Effect.yieldNow)

    const publishRow = (row: typeof OutboxBatchRow.Type) => {
      if (row.kv === null) {
        return nats.publishAcked(nats.subject(row.subject), encoder.encode(row.payload), {
          msgId: row.id,
          timeoutMs: publishTimeout,
          // The writer's trace, never the relay's own span.
          traceparent: row.trace
        })
      }
      // A KV operation: a publish to the bucket's own subject (`$KV.<bucket>.<key>`, the bucket
      // named under the prefix as `ensureBucket` names it); a delete is an empty message with the
      // `KV-Operation: DEL` header, as the KV client's own delete sends.
      const dot = row.subject.indexOf(".")
      const subject = `$KV.${nats.name(row.subject.slice(0, dot))}.${row.subject.slice(dot + 1)}`
      return nats.publishAcked(subject, row.kv === "del" ? new Uint8Array(0) : encoder.encode(row.payload), {
        msgId: row.id,
        timeoutMs: publishTimeout,
        traceparent: null,
        ...(row.kv === "del" ? { headers: { "KV-Operation": "DEL" } } : {})
      })
    }

    const waitForWork = Effect.timeoutOption(Queue.take(wakeups), pollInterval)
    const backoff = (failures: number) => Duration.millis(Math.min(maxBackoffMs, 50 * 2 ** Math.min(failures, 10)))

    /**
     * Leads while its connection lives: takes the session lock on a connection of its own
     * (waiting while another relay leads), then per batch ONE statement marks the batch published
     * before and reads the next (`sent` is excluded from the read: the statement's snapshot
     * still sees it unsent). A small batch is thus marked by the statement that finds nothing
     * new. Statements run on that connection (provided as the client's transaction connection,
     * without a transaction): if it dies, Postgres drops the lock, this fails, and the relay
     * starts over, as a follower.
     */
    const lead = Effect.scoped(Effect.gen(function*() {
      const conn = yield* sql.reserve
      const onLeaderConnection = Effect.provideService(sql.transactionService, [conn, 0] as const)
      for (;;) {
        const [lock] = yield* onLeaderConnection(
          lockRows(sql`SELECT pg_try_advisory_lock(${RELAY_LOCK_KEY}) AS locked`)
        )
        if (lock?.locked) break
        yield* waitForWork
      }
      // A pooled connection keeps a session lock: give it back before the connection.
      yield* Effect.addFinalizer(() =>
        onLeaderConnection(sql`SELECT pg_advisory_unlock(${RELAY_LOCK_KEY})`).pipe(Effect.ignore)
      )
      let sent: ReadonlyArray<string> = []
      let failures = 0
      for (;;) {
        // A wake-up offered before this statement starts is answered by it (its commit is in the
        // statement's snapshot): drop it, or it would cost another statement that finds nothing
        // (a commit wakes the relay twice in a process that runs it: pg_notify and `wake`).
        yield* Queue.clear(wakeups)
        const rows = yield* onLeaderConnection(outboxRows(sql`
          WITH sent AS (UPDATE outbox SET sent_at = now() WHERE id = ANY(${sent}::text[]))
          SELECT id, subject, payload::text AS payload, kv, trace FROM outbox
          WHERE sent_at IS NULL AND NOT (id = ANY(${sent}::text[]))
          ORDER BY seq LIMIT ${batchSize}`))
        sent = []
        if (rows.length === 0) {
          yield* waitForWork
          continue
        }
        // In order, one at a time: a failed publish stops the batch, so the stream never holds a
        // later row before an earlier one. The batch stays unsent and is read again.
        const published = yield* Effect.result(Effect.forEach(rows, publishRow, { discard: true }))
        if (published._tag === "Failure") {
          failures++
          yield* Effect.logWarning("outbox relay: publish failed, retrying", {
            attempt: failures,
            error: String(published.failure)
          })
          yield* Effect.sleep(backoff(failures))
          continue
        }
        failures = 0
        if (options.afterPublish) yield* options.afterPublish(rows.map(({ id, subject }) => ({ id, subject })))
        sent = rows.map((r) => r.id)
      }
    }))

    const relayLoop = Effect.gen(function*() {
      let failures = 0
      for (;;) {
        const started = Date.now()
        const result = yield* Effect.result(lead)
        // `lead` returns only by failing: its connection or a statement failed. The backoff
        // grows with failures in a row; one after a long run starts it afresh.
        failures = Date.now() - started > 60_000 ? 1 : failures + 1
        const delay = backoff(failures)
        yield* Effect.logWarning("outbox relay: leader connection lost, starting over", {
          attempt: failures,
          delayMs: Duration.toMillis(delay),
          error: result._tag === "Failure" ? String(result.failure) : "stopped"
        })
        yield* Effect.sleep(delay)
      }
    })

    // LISTEN on a connection of its own; on (re)connect, wake once to catch up on anything
    // committed while no one was listening.
    const listenLoop = Effect.scoped(Effect.gen(function*() {
      const notifications = yield* pg.listen(NOTIFY_CHANNEL)
      yield* wake
      for (;;) {
        yield* Queue.take(notifications)
        yield* wake
      }
    })).pipe(
      Effect.tapError((e) => Effect.logWarning("outbox relay: LISTEN lost, reconnecting", { error: String(e) })),
      Effect.retry(
        Schedule.min([Schedule.exponential(Duration.millis(100)), Schedule.spaced(Duration.millis(maxBackoffMs))])
      )
    )

    const pruneLoop = Effect.gen(function*() {
      for (;;) {
        yield* Effect.sleep(Duration.minutes(1))
        yield* sql`DELETE FROM outbox WHERE sent_at < now() - make_interval(secs => ${Duration.toSeconds(retention)})`
          .pipe(
            Effect.catchCause((cause) => Effect.logWarning("outbox relay: prune failed", { cause: String(cause) }))
          )
      }
    })

    // Untraced: a poll every second would be an endless trace of statements. The messages carry
    // their writers' trace (the rows' `trace`), not the relay's.
    yield* Effect.forkScoped(Effect.withTracerEnabled(relayLoop, false))
    yield* Effect.forkScoped(Effect.withTracerEnabled(listenLoop, false))
    yield* Effect.forkScoped(pruneLoop)

    const pending = countRows(sql`SELECT count(*)::int AS n FROM outbox WHERE sent_at IS NULL`).pipe(
      Effect.map((rows) => rows[0]?.n ?? 0),
      Effect.mapError((e) => new BusError({ operation: "outbox pending", message: String(e) }))
    )
    return OutboxRelay.of({ wake, pending })
  })

  /** The relay with default options; needs `Nats`, `SqlClient` and `PgClient`. */
  static readonly layer = Layer.effect(OutboxRelay, OutboxRelay.make())

  static readonly layerWith = (options: RelayOptions) => Layer.effect(OutboxRelay, OutboxRelay.make(options))
}

/** For callers that hold an `Option` of the relay (e.g. optional in-process wake-up). */
export const wakeIfPresent = Effect.flatMap(
  Effect.serviceOption(OutboxRelay),
  Option.match({
    onNone: () => Effect.void,
    onSome: (relay) => relay.wake
  })
)
