/**
 * Groups concurrent calls into one batch operation (one SQL statement for many deliveries):
 * a call waits in a queue; `workers` fibers each take whatever is queued (1 to `maxBatch`) and
 * run it as one batch. Under light load a batch is a single call and goes at once; under load
 * the batches grow by themselves while the previous one runs, so the per-call cost of the
 * database falls as throughput rises.
 */
import { Deferred, Effect, Exit, Queue } from "effect"

export interface BatcherOptions<I, O, E> {
  /** Runs one batch; returns one result per input, in order. */
  readonly run: (inputs: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
  readonly maxBatch: number
  /** Batches in flight at once. */
  readonly workers: number
}

/** A scoped batcher: `(input) => Effect<output>`; its workers stop with the scope. */
export const makeBatcher = Effect.fnUntraced(function*<I, O, E>(options: BatcherOptions<I, O, E>) {
  const queue = yield* Queue.unbounded<{ readonly input: I; readonly done: Deferred.Deferred<O, E> }>()
  const worker = Effect.forever(Effect.gen(function*() {
    const entries = yield* Queue.takeBetween(queue, 1, options.maxBatch)
    const exit = yield* Effect.exit(options.run(entries.map((e) => e.input)))
    if (Exit.isSuccess(exit)) {
      entries.forEach((entry, i) => Deferred.doneUnsafe(entry.done, Exit.succeed(exit.value[i]!)))
    } else {
      for (const entry of entries) Deferred.doneUnsafe(entry.done, exit as Exit.Exit<never, E>)
    }
  }))
  for (let i = 0; i < options.workers; i++) yield* Effect.forkScoped(worker)
  return (input: I): Effect.Effect<O, E> =>
    Effect.flatMap(Deferred.make<O, E>(), (done) =>
      Effect.andThen(Queue.offer(queue, { input, done }), Deferred.await(done)))
})
