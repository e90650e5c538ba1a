/**
 * The `EVENTS` stream: domain events on `evt.<orgId>.<event>`, the input of webhook fan-out.
 * Limits retention (several consumers read it independently); the duplicate window is the
 * horizon within which a relay restart cannot publish an outbox row twice.
 */
import { ensureStream, type StreamSpec } from "@svc/bus/Topology"
import { Effect } from "effect"

export const EVENTS: StreamSpec = {
  name: "EVENTS",
  subjects: ["evt.>"],
  retention: "limits",
  maxAgeMs: 7 * 24 * 3600_000,
  duplicateWindowMs: 10 * 60_000
}

/** Creates or updates the stream; returns its full (prefixed) name. */
export const ensure = Effect.fn("Events.ensure")(function*(overrides?: Partial<Omit<StreamSpec, "name" | "subjects">>) {
  return yield* ensureStream({ ...EVENTS, ...overrides })
})
