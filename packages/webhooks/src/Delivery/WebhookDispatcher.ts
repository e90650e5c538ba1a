/**
 * The dispatcher: consumes delivery jobs and makes the attempts (docs/contract.md#webhooks). Start
 * any number of processes; each pulls from every webhook's consumer (Jobs.ts).
 *
 * - Discovery: the live webhooks (Postgres) each get a durable consumer; each consumer gets a
 *   pull loop here, and each webhook's url, state and opened secret are kept in memory.
 *   Creating, updating or deleting a webhook notifies `svc_webhooks`, which rescans at once; a
 *   periodic rescan is the safety net. A deleted webhook's consumer is kept until its waiting
 *   jobs have come back (and been dead-lettered), then removed.
 * - Per webhook at most `concurrency` calls in flight in this process, and as many jobs again
 *   (times HELD_PER_SLOT) fetched and waiting for a slot; a job past its call (recording, acking)
 *   no longer counts, so the statements never hold the endpoint's slots, and a slow endpoint
 *   occupies only its own.
 * - A first attempt (the job carries the event and body; DeliveryStates.firstAttemptFastPath) is made
 *   at once: POST, then one statement numbers the attempt and writes its row with the result.
 *   Any other job is claimed first (DeliveryStore.claimAttempts: the rules of
 *   DeliveryStates.decideClaim under the delivery's row lock), which writes its row `pending` before
 *   the call, then the result is written. Then ack (success, dead letter) or nak with the
 *   ladder's wait. While a job is held the dispatcher tells the server it is still working, so
 *   ack_wait never expires under a live one.
 * - Attempts are numbered by the rows, never by JetStream's delivery count (DeliveryStates.ts says
 *   why); a first call cut short by a crash leaves no row, a claimed one a `pending` row that the
 *   next claim closes as lost.
 * - Claims and results of concurrent jobs (all webhooks of the process) are batched: one
 *   statement for many jobs (Batcher.ts; results linger 2 ms for company), and the acks of one
 *   event-loop turn go out in one write.
 * - A job whose last delivery was never acked (its dispatcher died): the server publishes
 *   MAX_DELIVERIES; one dispatcher (queue group) closes the delivery as dead_letter and removes
 *   the job. A sweep covers advisories published while no dispatcher was listening.
 * - Finished deliveries older than SVC_WEBHOOK_RETENTION are pruned by any dispatcher.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import type { ConsumerInfo, JsMsg } from "@nats-io/jetstream"
import { BusError, Nats } from "@svc/bus/Nats"
import * as Trace from "@svc/bus/Trace"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Rows from "@svc/db/Rows"
import {
  Context,
  Duration,
  Effect,
  Exit,
  FiberMap,
  FiberSet,
  Layer,
  Metric,
  Queue,
  Schedule,
  Schema,
  Semaphore,
  Stream
} from "effect"
import { SqlClient } from "effect/sql"
import { DispatchConfig, type DispatchSettings } from "../Config.ts"
import { WebhookSender } from "./Attempt.ts"
import { makeBatcher } from "./Batcher.ts"
import { afterAttempt, decideLostJob, deliveryStatusOf, firstAttemptFastPath } from "./DeliveryStates.ts"
import {
  consumerMatches,
  DeliveryJob,
  ensureDeliveryStream,
  ensureWebhookConsumer,
  webhookIdOfConsumer,
  WEBHOOKS_CHANNEL,
  webhookVersionSql
} from "./Jobs.ts"
import { deliveryHeaders } from "./Signature.ts"
import * as Store from "./Store.ts"

/**
 * Delivery attempts made, by the status they left (`succeeded`, `failed`: another attempt
 * follows, `dead_letter`). Prometheus: `svc_webhook_deliveries_total`.
 */
export const WebhookDeliveries = Metric.counter("svc_webhook_deliveries_total", {
  description: "Webhook delivery attempts made by this dispatcher, by the status they left",
  incremental: true
})
const deliveriesByStatus = {
  succeeded: Metric.withAttributes(WebhookDeliveries, { status: "succeeded" }),
  failed: Metric.withAttributes(WebhookDeliveries, { status: "failed" }),
  dead_letter: Metric.withAttributes(WebhookDeliveries, { status: "dead_letter" })
} as const

interface LiveWebhook {
  readonly url: string
  /** The signing secret as stored (sealed), and opened. */
  readonly sealed: string
  readonly secret: string
  readonly enabled: boolean
  /** `updated_at` in microseconds, as jobs carry it (DeliveryJob.webhook_version). */
  readonly version: number
}

/** Jobs a loop holds before or in their call, per call slot. */
const HELD_PER_SLOT = 4
/** Jobs a loop may have past their call (recording, acking) per call slot. */
const SETTLING_PER_SLOT = 16
/** How long a result waits for others to share its statement. */
const RESULT_LINGER_MS = 2
/** How long a pull request waits for jobs before it is renewed. */
const FETCH_EXPIRES_MS = 30_000
/** A deleted webhook's consumer is removed once drained and deleted at least this long ago. */
const DELETED_GRACE_SECONDS = 60
const SWEEP_INTERVAL = Duration.seconds(30)
const PRUNE_INTERVAL = Duration.minutes(10)
const PRUNE_CHUNK = 1_000

/**
 * Acks and naks given within one turn of the event loop go out together: each would otherwise be
 * a socket write of its own (the client flushes after every publish's microtask), and a write
 * costs about as much as a whole delivery's HTTP request on these machines.
 */
const makeAckCoalescer = () => {
  let queued: Array<() => void> = []
  const flush = () => {
    const now = queued
    queued = []
    for (const send of now) send()
  }
  const push = (send: () => void) => {
    if (queued.push(send) === 1) setImmediate(flush)
  }
  return {
    ack: (msg: JsMsg) => push(() => msg.ack()),
    nak: (msg: JsMsg, delayMs: number) => push(() => msg.nak(delayMs))
  }
}

const decodeJob = Schema.decodeUnknownExit(Schema.fromJsonString(DeliveryJob))
const textDecoder = new TextDecoder("utf-8", { fatal: true })

/** A DB call that fails is retried for a while (the job stays held), then given up. */
const dbRetry = Schedule.max([
  Schedule.min([Schedule.exponential(Duration.millis(100)), Schedule.spaced(Duration.seconds(5))]),
  Schedule.recurs(12)
])
/** `dbRetry` for a failure that may pass: a row its schema refuses would be refused again. */
const dbRetryUnlessRefused = {
  schedule: dbRetry,
  while: (e: { readonly _tag: string }) => e._tag !== "RowDecodeError"
}

const liveWebhooks = Rows.decoder(
  "WebhookDispatcher.discover",
  Schema.Struct({
    id: Schema.String,
    url: Schema.String,
    secret: Schema.String,
    enabled: Schema.Boolean,
    version: Rows.Int8
  })
)
const webhookIds = Rows.decoder("WebhookDispatcher.gone", Schema.Struct({ id: Schema.String }))

const busCall = <A>(operation: string, f: () => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (cause) => new BusError({ operation, message: String(cause) }) })

export interface DispatcherStats {
  /** Webhooks whose consumer this process pulls from. */
  readonly webhooks: ReadonlyArray<string>
}

export class WebhookDispatcher extends Context.Service<WebhookDispatcher, {
  /** Rescans webhooks and consumers now (also triggered by `svc_webhooks` notifications). */
  readonly discover: Effect.Effect<void>
  readonly stats: Effect.Effect<DispatcherStats>
  readonly settings: DispatchSettings
}>()("@svc/webhooks/Delivery/WebhookDispatcher") {
  static readonly make = Effect.fn("WebhookDispatcher.make")(function*(settings: DispatchSettings) {
    const nats = yield* Nats
    const sql = yield* SqlClient.SqlClient
    const pg = yield* PgClient.PgClient
    const sender = yield* WebhookSender
    const box = yield* SecretBox
    const stream = yield* ensureDeliveryStream
    const heartbeatEvery = Duration.millis(Math.max(100, Math.floor(settings.ackWaitMs / 3)))
    const provideSql = Effect.provideService(SqlClient.SqlClient, sql)

    // -- claims and results, batched across every job of this process ------------------------

    const claimBatch = (inputs: ReadonlyArray<Store.ClaimInput>) =>
      Effect.gen(function*() {
        // A statement takes one input per delivery (two copies of a job can meet in a batch):
        // the others go in a following statement, which sees what the first one wrote.
        const outcomes: Array<Store.ClaimResult> = inputs.map(() => ({ _tag: "Skip" }))
        let waiting = inputs.map((_, i) => i)
        while (waiting.length > 0) {
          const seen = new Set<string>()
          const wave: Array<number> = []
          const later: Array<number> = []
          for (const i of waiting) {
            if (seen.has(inputs[i]!.deliveryId)) later.push(i)
            else {
              seen.add(inputs[i]!.deliveryId)
              wave.push(i)
            }
          }
          const results = yield* Store.claimAttempts(wave.map((i) => inputs[i]!), settings.schedule)
          wave.forEach((i, k) => (outcomes[i] = results[k]!))
          waiting = later
        }
        return outcomes
      }).pipe(provideSql)

    // A failed statement is retried a while, for the whole batch, with its jobs held.
    const claim = yield* makeBatcher({
      run: (inputs: ReadonlyArray<Store.ClaimInput>) => Effect.retry(claimBatch(inputs), dbRetryUnlessRefused),
      maxBatch: 256,
      workers: 2
    })
    // Calls already made are recorded off the delivery's path: they may wait for company.
    const recordMade = yield* makeBatcher({
      run: (inputs: ReadonlyArray<Store.ClaimInput>) => Effect.retry(claimBatch(inputs), dbRetryUnlessRefused),
      maxBatch: 256,
      workers: 2,
      lingerMs: RESULT_LINGER_MS
    })
    // Results are not on the delivery's path (the call was made): a short linger turns many
    // one-row statements into a few larger ones at moderate rates.
    const record = yield* makeBatcher({
      run: (results: ReadonlyArray<Store.ResultWrite>) =>
        Effect.retry(provideSql(Store.writeResults(results)), dbRetry),
      maxBatch: 256,
      workers: 2,
      lingerMs: RESULT_LINGER_MS
    })

    const acks = makeAckCoalescer()

    // -- the live webhooks: where and how to sign (refreshed by discovery) --------------------

    let webhooks = new Map<string, LiveWebhook>()

    // -- one job ---------------------------------------------------------------------------

    /** A pull loop's side of a job: its call slots, and what to tell it once the call is over. */
    interface JobSlot {
      readonly sending: Semaphore.Semaphore
      readonly called: () => void
    }

    const handle = (msg: JsMsg, webhookId: string, slot: JobSlot) =>
      Effect.gen(function*() {
        const text = (() => {
          try {
            return textDecoder.decode(msg.data)
          } catch {
            return null
          }
        })()
        const decoded = text === null ? null : decodeJob(text)
        if (decoded === null || Exit.isFailure(decoded)) {
          yield* Effect.logWarning("webhook dispatcher: dropping an undecodable job", { subject: msg.subject })
          msg.term()
          return
        }
        const job = decoded.value
        const deliveryCount = msg.info.deliveryCount
        const base = { deliveryId: job.delivery_id, webhookId, round: job.round, jobSeq: msg.info.streamSequence }
        const webhook = webhooks.get(webhookId)
        const call = (data: Store.DeliveryData) => {
          const body = Buffer.from(data.body, "utf8")
          return slot.sending.withPermits(1)(sender.attempt({
            url: data.url,
            body,
            headers: deliveryHeaders({
              secret: data.secret,
              body,
              event: data.event,
              webhookId,
              deliveryId: job.delivery_id
            }),
            timeoutMs: settings.attemptTimeoutMs
          })).pipe(Effect.ensuring(Effect.sync(slot.called)))
        }
        const settle = (attempt: number, outcome: "succeeded" | "failed") =>
          Effect.suspend(() => {
            const after = afterAttempt(settings.schedule, attempt, { outcome })
            if (after._tag === "Failed") acks.nak(msg, after.delayMs)
            else acks.ack(msg)
            return Metric.update(deliveriesByStatus[deliveryStatusOf(after) as keyof typeof deliveriesByStatus], 1)
          })

        const fast = firstAttemptFastPath({
          deliveryCount,
          carriesBody: job.event !== undefined && job.body !== undefined,
          webhookVersion: job.webhook_version
        }, webhook)
        if (fast && job.event !== undefined && job.body !== undefined) {
          // The call first, then one statement numbers and records it.
          const result = yield* call({
            webhookId,
            url: webhook!.url,
            secret: webhook!.secret,
            event: job.event,
            body: job.body
          })
          const recorded = yield* recordMade({ ...base, made: result })
          if (recorded._tag === "Recorded") yield* settle(recorded.attempt, result.outcome)
          else acks.ack(msg)
          return
        }

        const claimed = yield* claim(base)
        if (claimed._tag !== "Attempt") {
          acks.ack(msg)
          return
        }
        // Stored sealed, bound to the webhook id (Webhooks.create); opened only for the signature.
        const secret = yield* box.open(claimed.data.secret, webhookId)
        const result = yield* call({ ...claimed.data, secret })
        const outcome = afterAttempt(settings.schedule, claimed.attempt, result)
        yield* record({
          attemptId: claimed.attemptId,
          deliveryId: job.delivery_id,
          round: job.round,
          status: deliveryStatusOf(outcome) as "succeeded" | "failed" | "dead_letter",
          responseCode: result.responseCode,
          error: result.error,
          durationMs: result.durationMs,
          delayMs: outcome._tag === "Failed" ? outcome.delayMs : null
        })
        yield* settle(claimed.attempt, result.outcome)
      }).pipe(
        // A job we could not finish (database unreachable) is left un-acked: it comes back after
        // ack_wait, to this or another dispatcher.
        Effect.catchCause((cause) =>
          Effect.logWarning("webhook dispatcher: job left for redelivery", {
            subject: msg.subject,
            cause: String(cause)
          })
        ),
        // The fan-out's trace (the job's `traceparent` header), when spans are exported.
        Trace.continueMessage("WebhookDispatcher.deliver", msg.headers, {
          attributes: { "webhook.id": webhookId }
        })
      )

    // -- one webhook's pull loop -------------------------------------------------------------

    const pullLoop = (webhookId: string, consumerName: string) =>
      Effect.gen(function*() {
        const consumer = yield* busCall(`consumer ${consumerName}`, () => nats.js.consumers.get(stream, consumerName))
        const running = yield* FiberSet.make()
        const freed = yield* Queue.sliding<void>(1)
        const sending = Semaphore.makeUnsafe(settings.concurrency)
        // Jobs before or in their call: at most `concurrency` calling and as many waiting for a
        // slot (their claim done). A job past its call (recording, acking) no longer counts: the
        // statements never hold the endpoint's slots. Settling jobs have a bound of their own,
        // so a database that stops answering stops the calls too.
        const maxHeld = settings.concurrency * HELD_PER_SLOT
        const maxSettling = settings.concurrency * SETTLING_PER_SLOT
        let beforeCall = 0
        let settling = 0
        // Tell the server we are alive for every job we hold (one timer for the loop).
        const held = new Set<JsMsg>()
        yield* Effect.forkScoped(Effect.forever(Effect.andThen(
          Effect.sleep(heartbeatEvery),
          Effect.sync(() => held.forEach((msg) => msg.working()))
        )))
        // Under load, pull in chunks of at least half the slots (each pull is a round trip of its
        // own); when the backlog is empty, wait with whatever slots are free.
        const chunk = Math.max(1, Math.ceil(maxHeld / 2))
        let backlog = false
        for (;;) {
          // oxlint-disable-next-line no-unmodified-loop-condition -- the stream's callbacks below change the counters
          while (beforeCall >= maxHeld || settling >= maxSettling || (backlog && maxHeld - beforeCall < chunk)) {
            yield* Queue.take(freed)
          }
          const wanted = maxHeld - beforeCall
          let received = 0
          yield* Effect.acquireUseRelease(
            busCall(`fetch ${consumerName}`, () => consumer.fetch({ max_messages: wanted, expires: FETCH_EXPIRES_MS })),
            (batch) =>
              Stream.fromAsyncIterable(batch, (cause) =>
                new BusError({ operation: `fetch ${consumerName}`, message: String(cause) })).pipe(
                  Stream.runForEach((msg) => {
                    beforeCall++
                    received++
                    held.add(msg)
                    let called = false
                    const slot: JobSlot = {
                      sending,
                      called: () => {
                        if (called) {
                          return
                        }
                        called = true
                        beforeCall--
                        settling++
                        Queue.offerUnsafe(freed, undefined)
                      }
                    }
                    return FiberSet.run(
                      running,
                      handle(msg, webhookId, slot).pipe(
                        Effect.ensuring(Effect.sync(() => {
                          held.delete(msg)
                          if (called) {
                            settling--
                          } else beforeCall--
                          Queue.offerUnsafe(freed, undefined)
                        }))
                      )
                    )
                  })
                ),
            (batch) =>
              Effect.sync(() => batch.stop())
          )
          backlog = received === wanted
        }
      }).pipe(
        Effect.scoped,
        Effect.tapError((e) =>
          Effect.logWarning("webhook dispatcher: pull loop failed, restarting", { webhookId, error: String(e) })
        ),
        Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(200)), Schedule.spaced(Duration.seconds(5))])),
        Effect.ignore
      )

    // -- discovery ---------------------------------------------------------------------------

    const loops = yield* FiberMap.make<string>()

    const listConsumers = busCall("list consumers", async () => {
      const all: Array<ConsumerInfo> = []
      for await (const info of nats.jsm.consumers.list(stream)) all.push(info)
      return all
    })

    const discoverOnce = Effect.gen(function*() {
      const consumers = yield* listConsumers
      const rows = yield* liveWebhooks(sql`
        SELECT id, url, secret, enabled, ${webhookVersionSql(sql, "updated_at")} AS version
        FROM webhooks WHERE deleted_at IS NULL`)
      const previous = webhooks
      const next = new Map<string, LiveWebhook>()
      for (const r of rows) {
        const before = previous.get(r.id)
        // Opened once per stored value; one that does not open stays out, so its jobs take the
        // claim path, which reports it.
        const secret = before?.sealed === r.secret ? before.secret : yield* Effect.option(box.open(r.secret, r.id))
        const version = Number(r.version)
        if (typeof secret === "string") {
          next.set(r.id, { url: r.url, sealed: r.secret, secret, enabled: r.enabled, version })
        } else if (secret._tag === "Some") {
          next.set(r.id, { url: r.url, sealed: r.secret, secret: secret.value, enabled: r.enabled, version })
        }
      }
      webhooks = next
      const live = new Set(rows.map((r) => r.id))
      const byWebhook = new Map<string, ConsumerInfo>()
      for (const info of consumers) {
        const id = webhookIdOfConsumer(nats, info.name)
        if (id !== null) byWebhook.set(id, info)
      }
      const wanted = new Map<string, string>()
      for (const id of live) {
        const info = byWebhook.get(id)
        if (info === undefined || !consumerMatches(info.config, settings)) {
          wanted.set(id, yield* ensureWebhookConsumer(id, settings))
        } else {
          wanted.set(id, info.name)
        }
      }
      // Consumers of webhooks that are gone: keep pulling until their jobs have come back.
      const gone = [...byWebhook.keys()].filter((id) => !live.has(id))
      if (gone.length > 0) {
        const settled = new Set((yield* webhookIds(sql`
          SELECT id FROM webhooks WHERE id = ANY(${gone}::text[])
            AND deleted_at < now() - make_interval(secs => ${DELETED_GRACE_SECONDS}::int)`)).map((r) => r.id))
        const known = new Set(
          (yield* webhookIds(sql`SELECT id FROM webhooks WHERE id = ANY(${gone}::text[])`)).map((r) => r.id)
        )
        for (const id of gone) {
          const info = byWebhook.get(id)!
          const drained = info.num_pending === 0 && info.num_ack_pending === 0
          if (drained && (settled.has(id) || !known.has(id))) {
            yield* FiberMap.remove(loops, info.name)
            yield* busCall(`delete consumer ${info.name}`, () => nats.jsm.consumers.delete(stream, info.name)).pipe(
              Effect.ignore
            )
          } else {
            wanted.set(id, info.name)
          }
        }
      }
      for (const [id, name] of wanted) {
        yield* FiberMap.run(loops, name, pullLoop(id, name), { onlyIfMissing: true })
      }
      const keep = new Set(wanted.values())
      for (const [name] of Array.from(loops)) {
        if (!keep.has(name)) yield* FiberMap.remove(loops, name)
      }
    })

    const wakeups = yield* Queue.sliding<void>(1)
    const discover = Effect.asVoid(Queue.offer(wakeups, undefined))

    // The first scan happens before the layer is ready: a caller may deliver at once.
    yield* discoverOnce.pipe(Effect.retry(Schedule.max([Schedule.spaced(Duration.millis(500)), Schedule.recurs(10)])))

    yield* Effect.forkScoped(Effect.gen(function*() {
      for (;;) {
        yield* Effect.timeoutOption(Queue.take(wakeups), Duration.millis(settings.discoveryIntervalMs))
        yield* discoverOnce.pipe(
          Effect.catchCause((cause) =>
            Effect.logWarning("webhook dispatcher: discovery failed", { cause: String(cause) })
          )
        )
      }
    }))

    yield* Effect.forkScoped(
      Effect.scoped(Effect.gen(function*() {
        const notifications = yield* pg.listen(WEBHOOKS_CHANNEL)
        yield* discover
        for (;;) {
          yield* Queue.take(notifications)
          yield* discover
        }
      })).pipe(
        Effect.tapError((e) =>
          Effect.logWarning("webhook dispatcher: LISTEN lost, reconnecting", { error: String(e) })
        ),
        Effect.retry(Schedule.spaced(Duration.seconds(1)))
      )
    )

    // -- jobs the server gave up on ---------------------------------------------------------

    const lostJobs = yield* Queue.unbounded<{ readonly seq: number; readonly deliveries: number }>()
    const advisorySubject = `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${stream}.*`
    const advisories = nats.connection.subscribe(advisorySubject, {
      queue: nats.name("webhook_dispatchers"),
      callback: (error, msg) => {
        if (error) return
        try {
          const advisory = msg.json<{ stream_seq?: unknown; deliveries?: unknown }>()
          if (typeof advisory.stream_seq === "number" && typeof advisory.deliveries === "number") {
            Queue.offerUnsafe(lostJobs, { seq: advisory.stream_seq, deliveries: advisory.deliveries })
          }
        } catch {
          // not an advisory we understand
        }
      }
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => advisories.unsubscribe()))

    const closeLostJob = Effect.fn("WebhookDispatcher.closeLostJob")(
      function*(lost: { readonly seq: number; readonly deliveries: number }) {
        const stored = yield* busCall("get lost job", () => nats.jsm.streams.getMessage(stream, { seq: lost.seq }))
        const decoded = stored === null ? null : decodeJob(new TextDecoder().decode(stored.data))
        if (decoded !== null && Exit.isSuccess(decoded)) {
          const job = decoded.value
          const { state } = yield* provideSql(Store.loadClaim(job.delivery_id))
          const decision = decideLostJob({ round: job.round, deliveries: lost.deliveries }, state)
          if (decision._tag !== "Nothing") {
            yield* provideSql(Store.writeLostJob({
              deliveryId: job.delivery_id,
              round: job.round,
              addAttempt: decision._tag === "AddDeadRow" ? decision.attempt : null
            }))
          }
        }
        // Work-queue streams keep a message the consumer gave up on: remove it.
        yield* busCall("delete lost job", () => nats.jsm.streams.deleteMessage(stream, lost.seq, false))
      }
    )

    yield* Effect.forkScoped(Effect.forever(
      Queue.take(lostJobs).pipe(
        Effect.flatMap((lost) =>
          closeLostJob(lost).pipe(
            Effect.retry(dbRetryUnlessRefused),
            Effect.catchCause((cause) =>
              Effect.logWarning("webhook dispatcher: could not close a lost job", {
                seq: lost.seq,
                cause: String(cause)
              })
            )
          )
        )
      )
    ))

    yield* Effect.forkScoped(Effect.forever(Effect.gen(function*() {
      yield* Effect.sleep(SWEEP_INTERVAL)
      // Far beyond any attempt a live dispatcher could still be making.
      const olderThan = settings.ackWaitMs + settings.attemptTimeoutMs + 60_000
      yield* provideSql(Store.sweepLostLastAttempts(olderThan)).pipe(
        Effect.catchCause((cause) => Effect.logWarning("webhook dispatcher: sweep failed", { cause: String(cause) }))
      )
    })))

    // Finished deliveries past the retention period go, a chunk at a time (any dispatcher may
    // prune; rows one holds are skipped by the others).
    yield* Effect.forkScoped(Effect.forever(
      Effect.gen(function*() {
        yield* Effect.sleep(PRUNE_INTERVAL)
        for (;;) {
          const pruned = yield* provideSql(Store.pruneFinished(settings.retentionMs, PRUNE_CHUNK))
          if (pruned < PRUNE_CHUNK) break
        }
      }).pipe(
        Effect.catchCause((cause) => Effect.logWarning("webhook dispatcher: prune failed", { cause: String(cause) }))
      )
    ))

    const stats = Effect.sync((): DispatcherStats => ({
      webhooks: [...loops].map(([name]) => webhookIdOfConsumer(nats, name)).filter((id): id is NonNullable<typeof id> =>
        id !== null
      )
    }))

    return WebhookDispatcher.of({ discover, stats, settings })
  })

  /** Settings from the environment (DispatchConfig); needs Nats, SqlClient, PgClient, WebhookSender, SecretBox. */
  static readonly layer = Layer.effect(WebhookDispatcher)(Effect.flatMap(DispatchConfig, WebhookDispatcher.make))

  static readonly layerWith = (settings: DispatchSettings) =>
    Layer.effect(WebhookDispatcher)(WebhookDispatcher.make(settings))
}
