/**
 * A durable consumer's messages for as long as a scope lasts.
 *
 * Why not `messages.close()` in the release: nats.js stops an iterator by queueing a callback that
 * only the iterator's reader runs, and `close()` resolves once it has. When the scope closes
 * before anyone has read (a role stopped right after it started, the reading fiber interrupted
 * before its first pull), nobody ever runs it and `close()` never resolves: the stop hangs for
 * ever. `stop()` unsubscribes and clears the consumer's timers at once, which is all a stop needs;
 * unacknowledged messages come back after the consumer's ack wait, as on any crash.
 */
import type { ConsumeOptions, Consumer, ConsumerMessages } from "@nats-io/jetstream"
import { Effect, type Scope } from "effect"
import { BusError } from "./Nats.ts"

export const consumeScoped = (
  consumer: Consumer,
  operation: string,
  options?: ConsumeOptions
): Effect.Effect<ConsumerMessages, BusError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => consumer.consume(options),
      catch: (cause) => new BusError({ operation, message: String(cause) })
    }),
    (messages) =>
      Effect.sync(() => {
        try {
          messages.stop()
        } catch {
          // a connection already closed has nothing left to stop
        }
      })
  )
