/**
 * The trace context across messages: a message carries the span that sent it as a W3C
 * `traceparent` header (`00-<trace id>-<span id>-<flags>`), and its consumer runs in a span
 * continuing it, so that one request is one trace through every process it reaches.
 *
 * Only when spans go somewhere: with Effect's native tracer (no exporter configured,
 * `@svc/telemetry`) nothing is added to a message and no consumer span is made, so a process
 * without an exporter pays one reference lookup per message. `Nats.publishAcked` adds the header
 * of the current span itself; the outbox stores it with the row and its relay sends it
 * (`@svc/events/Outbox`, `Relay`).
 */
import type { MsgHdrs } from "@nats-io/transport-node"
import { Context, Effect, type Fiber, Tracer } from "effect"

export const TRACEPARENT = "traceparent"

const W3C = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/
const ZERO_TRACE = "0".repeat(32)
const ZERO_SPAN = "0".repeat(16)

/** Whether this fiber's spans are exported (a tracer other than the native one). */
export const isTracing = (fiber: Fiber.Fiber<unknown, unknown>): boolean =>
  fiber.getRef(Tracer.Tracer) !== Tracer.nativeTracer

/** The `traceparent` of a span. */
export const format = (span: Tracer.AnySpan): string =>
  `00-${span.traceId.padStart(32, "0")}-${span.spanId}-${span.sampled ? "01" : "00"}`

/** The span a `traceparent` names, or undefined when it is absent or malformed (then ignored). */
export const parse = (header: string | null | undefined): Tracer.ExternalSpan | undefined => {
  if (header === undefined || header === null || header === "") return undefined
  const match = W3C.exec(header.trim().toLowerCase())
  if (match === null || match[1] === ZERO_TRACE || match[2] === ZERO_SPAN) return undefined
  return Tracer.externalSpan({
    traceId: match[1]!,
    spanId: match[2]!,
    sampled: (Number.parseInt(match[3]!, 16) & 1) === 1
  })
}

/** The `traceparent` of the fiber's current span when tracing, else undefined. */
export const currentUnsafe = (fiber: Fiber.Fiber<unknown, unknown>): string | undefined => {
  if (!isTracing(fiber)) return undefined
  const span = Context.getOrUndefined(fiber.context, Tracer.ParentSpan)
  return span === undefined ? undefined : format(span)
}

/** The `traceparent` of the current span when tracing, else undefined. */
export const current: Effect.Effect<string | undefined> = Effect.withFiber((fiber) =>
  Effect.succeed(currentUnsafe(fiber))
)

export interface ConsumeOptions {
  readonly attributes?: Record<string, unknown>
  readonly kind?: Tracer.SpanKind
}

/**
 * Runs `effect` in a span named `name` that continues the trace of `traceparent` (a message's
 * header, an outbox row's column), or starts a trace of its own when there is none: a consumer
 * loop's ambient span (the layer that forked it) is never the parent. Without a tracer the
 * effect runs as it is.
 */
export const continueFrom = (
  name: string,
  traceparent: string | null | undefined,
  options: ConsumeOptions = {}
) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) => {
    if (!isTracing(fiber)) return effect
    const parent = parse(traceparent)
    return Effect.withSpan(effect, name, {
      kind: options.kind ?? "consumer",
      ...(options.attributes !== undefined ? { attributes: options.attributes } : {}),
      ...(parent !== undefined ? { parent } : { root: true })
    })
  })

/** `continueFrom` with the `traceparent` header of a NATS message. */
export const continueMessage = (
  name: string,
  headers: MsgHdrs | undefined,
  options: ConsumeOptions = {}
) => continueFrom(name, headers?.get(TRACEPARENT), options)
