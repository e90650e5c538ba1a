/**
 * Server-sent event bodies of processes (streamed exec, followed output), written by hand
 * rather than by the HttpApi's stream encoder for two reasons: the answer's head and a first
 * comment go out at once (a follower of a quiet process must not wait for its first byte to
 * learn the answer is 200), and a comment every `HEARTBEAT_MS` keeps an idle stream from being
 * cut by proxies on the way. Clients ignore comments (lines starting with `:`).
 */
import { Duration, Effect, Schedule, Stream } from "effect"
import { HttpServerResponse } from "effect/http"

export const HEARTBEAT_MS = 15_000

export interface SseEvent {
  readonly event: string
  readonly data: string
}

const encoder = new TextEncoder()

/** One event (`data` is one line: JSON, base64). */
export const render = (event: SseEvent) => encoder.encode(`event: ${event.event}\ndata: ${event.data}\n\n`)

/** A 200 `text/event-stream` answer carrying `events`, opened at once, kept alive while idle. */
export const response = <E>(events: Stream.Stream<SseEvent, E>) =>
  HttpServerResponse.stream(
    Stream.concat(
      Stream.make(encoder.encode(": stream\n\n")),
      Stream.merge(
        Stream.map(events, render),
        Stream.fromEffectSchedule(
          Effect.succeed(encoder.encode(":\n\n")),
          Schedule.spaced(Duration.millis(HEARTBEAT_MS))
        ),
        { haltStrategy: "left" }
      )
    ),
    { contentType: "text/event-stream", headers: { "cache-control": "no-cache", "x-accel-buffering": "no" } }
  )
