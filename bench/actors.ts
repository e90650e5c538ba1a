/**
 * The actor runtime against a raw JetStream publish + consume loop, in the same run, on the same
 * throwaway NATS and Postgres:
 *   - messages/s through ONE partition (the single-writer ceiling of one entity group), and
 *     through P partitions (BENCH_PARTITIONS, default 8) in one runtime process;
 *   - baseline: the same publishes to a workqueue stream whose P consumers have the same
 *     `max_ack_pending: 1`, acked at once (what JetStream alone allows);
 *   - the outbox relay's latency: transaction committed → message seen on the bus.
 * Median of BENCH_RUNS (3) runs per figure.
 *   npm run bench actors     (or: node bench/actors.ts)
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Actor from "../packages/actors/src/Actor.ts"
import * as Actors from "../packages/actors/src/Actors.ts"
import { ActorRuntime } from "../packages/actors/src/Runtime.ts"
import { Nats } from "../packages/bus/src/Nats.ts"
import * as Outbox from "../packages/events/src/Outbox.ts"
import { OutboxRelay } from "../packages/events/src/Relay.ts"
import * as Streams from "../packages/events/src/Streams.ts"

const RUNS = Number(process.env.BENCH_RUNS ?? 3)
const P = Number(process.env.BENCH_PARTITIONS ?? 8)
const N1 = Number(process.env.BENCH_MESSAGES ?? 2000)
const NP = N1 * 2
const ENTITIES = 64
const LATENCY_EVENTS = 300

const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const quantile = (xs: ReadonlyArray<number>, q: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!
}
const fmt = (n: number, d = 0) => n.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d })

const Tally = Schema.Struct({ n: Schema.Int })
const Bump = Schema.Struct({ by: Schema.Int })
const makeActor = (type: string, partitions: number) =>
  Actor.make({
    type,
    partitions,
    state: Tally,
    message: Bump,
    transition: (state, message) => Actor.next({ n: (state?.n ?? 0) + message.by })
  })

const encoder = new TextEncoder()
const body = encoder.encode(JSON.stringify({ by: 1 }))

/** Publishes `n` messages over `subjects` round-robin, 100 in flight at a time. */
const publishAll = (subjects: ReadonlyArray<string>, n: number) =>
  Effect.gen(function*() {
    const nats = yield* Nats
    for (let i = 0; i < n; i += 100) {
      const batch: Array<Promise<unknown>> = []
      for (let j = i; j < Math.min(n, i + 100); j++) batch.push(nats.js.publish(subjects[j % subjects.length]!, body))
      yield* Effect.promise(() => Promise.all(batch))
    }
  })

/**
 * Raw JetStream: the very stream and consumers the runtime would use (`Actors.ensure`: workqueue,
 * P consumers with max_ack_pending 1), each message acked on arrival.
 */
const rawRun = (run: string, partitions: number, n: number) =>
  Effect.scoped(Effect.gen(function*() {
    const nats = yield* Nats
    const actor = makeActor(`raw_${run}`, partitions)
    yield* Actors.ensure(actor)
    let done = 0
    let finish!: () => void
    const finished = new Promise<void>((r) => {
      finish = r
    })
    for (let p = 0; p < partitions; p++) {
      const c = yield* Effect.promise(() =>
        nats.js.consumers.get(nats.name(Actor.streamName(actor)), nats.name(Actor.consumerName(actor, p)))
      )
      const messages = yield* Effect.acquireRelease(Effect.promise(() => c.consume({ max_messages: 16 })), (m) =>
        Effect.promise(() => m.close()))
      ;(async () => {
        for await (const m of messages) {
          m.ack()
          if (++done === n) {
            finish()
          }
        }
      })()
    }
    const subjects = Array.from({ length: ENTITIES }, (_, e) =>
      nats.subject(...Actor.mailboxTokens(actor, `e${e}`)))
    const started = performance.now()
    yield* publishAll(subjects, n)
    yield* Effect.promise(() => finished)
    return n / ((performance.now() - started) / 1000)
  }))

/** The runtime: same publishes to the actor's mailboxes; done when the runtime applied all. */
const actorRun = (run: string, partitions: number, n: number) =>
  Effect.scoped(Effect.gen(function*() {
    const nats = yield* Nats
    const actor = makeActor(`bench_${run}`, partitions)
    let applied = 0
    let finish!: () => void
    const finished = new Promise<void>((r) => {
      finish = r
    })
    yield* Layer.build(ActorRuntime.layer([actor], {
      hooks: {
        onOutcome: (_i, o) =>
          Effect.sync(() => {
            if (o === "applied" && ++applied === n) finish()
          })
      }
    }))
    const subjects = Array.from({ length: ENTITIES }, (_, e) => nats.subject(...Actor.mailboxTokens(actor, `e${e}`)))
    const started = performance.now()
    yield* publishAll(subjects, n)
    yield* Effect.promise(() => finished)
    return n / ((performance.now() - started) / 1000)
  }))

/** Outbox relay latency: commit of a one-event transaction → the event seen by a subscriber. */
const relayLatency = Effect.scoped(Effect.gen(function*() {
  const nats = yield* Nats
  const sql = yield* SqlClient.SqlClient
  yield* Streams.ensure()
  yield* Layer.build(OutboxRelay.layer)
  const sub = nats.connection.subscribe(nats.subject("evt", "org_bench", ">"))
  yield* Effect.addFinalizer(() => Effect.sync(() => sub.unsubscribe()))
  const iterator = sub[Symbol.asyncIterator]()
  const latencies: Array<number> = []
  for (let i = 0; i < LATENCY_EVENTS + 20; i++) {
    yield* sql.withTransaction(Outbox.appendEvent({ event: "bench.tick", orgId: "org_bench", data: { i } }))
    const committed = performance.now()
    yield* Effect.promise(() => iterator.next())
    if (i >= 20) latencies.push(performance.now() - committed) // the first ones warm up
  }
  return latencies
}))

const [natsServer, pg] = await Promise.all([startNats(), startPostgres()])
process.env.SVC_TEST_NATS_URL = natsServer.url
process.env.SVC_TEST_DATABASE_URL = pg.url

await Effect.runPromise(
  Effect.gen(function*() {
    // Warm-up (JIT, pool connections, stream creation paths).
    yield* rawRun("w", 1, 300)
    yield* actorRun("w", 1, 300)

    const results: Record<string, Array<number>> = { raw1: [], actor1: [], rawP: [], actorP: [] }
    for (let i = 0; i < RUNS; i++) {
      results.raw1!.push(yield* rawRun(`a${i}`, 1, N1))
      results.actor1!.push(yield* actorRun(`a${i}`, 1, N1))
      results.rawP!.push(yield* rawRun(`b${i}`, P, NP))
      results.actorP!.push(yield* actorRun(`b${i}`, P, NP))
    }
    const m = Object.fromEntries(Object.entries(results).map(([k, v]) => [k, median(v)])) as Record<string, number>
    console.log(
      `Actor runtime vs raw JetStream (max_ack_pending 1 per partition), ${ENTITIES} entities, median of ${RUNS} runs`
    )
    console.log(
      `  1 partition, ${N1} msgs:  raw ${fmt(m.raw1!)} msg/s   actors ${fmt(m.actor1!)} msg/s   ratio ${
        fmt(m.actor1! / m.raw1!, 2)
      }`
    )
    console.log(
      `  ${P} partitions, ${NP} msgs: raw ${fmt(m.rawP!)} msg/s   actors ${fmt(m.actorP!)} msg/s   ratio ${
        fmt(m.actorP! / m.rawP!, 2)
      }`
    )
    console.log(
      `  scaling 1 → ${P} partitions: raw x${fmt(m.rawP! / m.raw1!, 2)}, actors x${fmt(m.actorP! / m.actor1!, 2)}`
    )

    const latencies = yield* relayLatency
    console.log(`Outbox relay: commit → on the bus, ${LATENCY_EVENTS} sequential events`)
    console.log(
      `  p50 ${fmt(quantile(latencies, 0.5), 2)} ms   p99 ${fmt(quantile(latencies, 0.99), 2)} ms   max ${
        fmt(Math.max(...latencies), 2)
      } ms`
    )
  }).pipe(
    Effect.provide(Layer.mergeAll(TestNats.layer, TestDatabase.layer)),
    Effect.scoped
  )
)
await Promise.all([natsServer.stop(), pg.close()])
