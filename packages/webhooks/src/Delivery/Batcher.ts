/**
 * Groups concurrent calls into one batch operation (one SQL statement for many deliveries):
 * a call waits in a queue; `workers` fibers each take whatever is queued (1 to `maxBatch`) and
 * run it as one batch. Under light load a batch is a single call and goes at once; under load
 * the batches grow by themselves while the previous one runs, so the per-call cost of the
 * database falls as throughput rises.
 */
import { Deferred, Duration, Effect, Exit, Queue, Semaphore } from "effect"

export interface BatcherOptions<I, O, E> {
  /** Runs one batch; returns one result per input, in order. */
  readonly run: (inputs: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
  readonly maxBatch: number
  /** Batches in flight at once. */
  readonly workers: number
  /**
   * After the first call of a batch, wait this long for more before running it (default 0).
   * For writes nobody waits on for long (results before an ack): at a moderate rate it turns
   * many one-row statements into a few larger ones.
   */
  readonly lingerMs?: number
}

/** A scoped batcher: `(input) => Effect<output>`; its workers stop with the scope. */
export const makeBatcher = Effect.fnUntraced(function*<I, O, E>(options: BatcherOptions<I, O, E>) {
  const linger = options.lingerMs !== undefined && options.lingerMs > 0 ? Duration.millis(options.lingerMs) : undefined
  const queue = yield* Queue.unbounded<{ readonly input: I; readonly done: Deferred.Deferred<O, E> }>()
  // One worker gathers at a time (so two lingering workers never split a batch between them);
  // the batches themselves run concurrently.
  const gathering = Semaphore.makeUnsafe(1)
  const gather = gathering.withPermits(1)(Effect.gen(function*() {
    const entries = [...yield* Queue.takeBetween(queue, 1, options.maxBatch)]
    if (linger !== undefined && entries.length < options.maxBatch) {
      yield* Effect.sleep(linger)
      // (takeBetween with a minimum of 0 takes nothing: ask for 1 only when something is there.)
      if (Queue.sizeUnsafe(queue) > 0) {
        entries.push(...yield* Queue.takeBetween(queue, 1, options.maxBatch - entries.length))
      }
    }
    return entries
  }))
  const worker = Effect.forever(Effect.gen(function*() {
    const entries = yield* gather
    const exit = yield* Effect.exit(options.run(entries.map((e) => e.input)))
    if (Exit.isSuccess(exit)) {
      entries.forEach((entry, i) => Deferred.doneUnsafe(entry.done, Exit.succeed(exit.value[i]!)))
    } else {
      for (const entry of entries) Deferred.doneUnsafe(entry.done, exit as Exit.Exit<never, E>)
    }
  }))
  for (let i = 0; i < options.workers; i++) yield* Effect.forkScoped(worker)
  return (input: I): Effect.Effect<O, E> =>
    Effect.flatMap(
      Deferred.make<O, E>(),
      (done) => Effect.andThen(Queue.offer(queue, { input, done }), Deferred.await(done))
    )
})
