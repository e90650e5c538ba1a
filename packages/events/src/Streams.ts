/**
 * The `EVENTS` stream: domain events on `evt.<orgId>.<event>`, the input of webhook fan-out.
 * Limits retention (several consumers read it independently); the duplicate window is the
 * horizon within which a relay restart cannot publish an outbox row twice.
 */
import { Nats } from "@svc/bus/Nats"
import { ensureStream, type StreamSpec } from "@svc/bus/Topology"
import { Effect } from "effect"

export const EVENTS: StreamSpec = {
  name: "EVENTS",
  subjects: ["evt.>"],
  retention: "limits",
  maxAgeMs: 7 * 24 * 3600_000,
  duplicateWindowMs: 10 * 60_000
}

/**
 * The stream's name once this connection (the `Nats` service, one per connection) has ensured
 * it. Ensuring is two JetStream requests, the stream's info and an update that rewrites its
 * config on the server: done on every `GET /v1/events`, it was a good part of what opening one
 * cost (bench/README.md, tti's "waitFor running"). A failed ensure forgets it, and so does
 * `forget` (a caller whose use of the stream failed), so a stream removed since is made again.
 */
const ensured = new WeakMap<object, string>()

/**
 * Creates or updates the stream, once per connection; returns its full (prefixed) name. With
 * `overrides` it always asks the server (their config is applied).
 */
export const ensure = Effect.fn("Events.ensure")(function*(overrides?: Partial<Omit<StreamSpec, "name" | "subjects">>) {
  const nats = yield* Nats
  const known = overrides === undefined ? ensured.get(nats) : undefined
  if (known !== undefined) return known
  const stream = yield* ensureStream({ ...EVENTS, ...overrides }).pipe(
    Effect.tapError(() => Effect.sync(() => ensured.delete(nats)))
  )
  ensured.set(nats, stream)
  return stream
})

/** The next `ensure` on this connection asks the server again (the stream may be gone). */
export const forget: Effect.Effect<void, never, Nats> = Effect.gen(function*() {
  ensured.delete(yield* Nats)
})
