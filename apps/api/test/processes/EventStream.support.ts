/**
 * A server-sent events client for the process tests: reads events as they arrive over a real
 * HTTP connection (never the whole body first), so a test can act between two events.
 */
import { Effect, Queue, type Scope } from "effect"
import * as Http from "node:http"

export interface SseEvent {
  readonly event: string
  readonly data: string
  /** The event's `id` field, when it had one. */
  readonly id?: string
}

export interface EventSource {
  readonly status: number
  readonly headers: Http.IncomingHttpHeaders
  /** The next event, or undefined once the stream ended. */
  readonly next: Effect.Effect<SseEvent | undefined>
  /** Every event until the stream ends. */
  readonly rest: Effect.Effect<ReadonlyArray<SseEvent>>
  /** The body, when the answer was not a stream (a refusal). */
  readonly body: Effect.Effect<string>
}

/** Opens `method path` with `Accept: text/event-stream`; the connection ends with the scope. */
export const openEvents = (
  base: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {}
): Effect.Effect<EventSource, never, Scope.Scope> =>
  Effect.gen(function*() {
    const events = yield* Queue.unbounded<SseEvent | undefined>()
    let text = ""
    let raw = ""
    const response = yield* Effect.acquireRelease(
      Effect.callback<{ response: Http.IncomingMessage; request: Http.ClientRequest }>((resume) => {
        const url = new URL(base + path)
        const request = Http.request({
          host: url.hostname,
          port: url.port,
          path: url.pathname + url.search,
          method,
          agent: false,
          headers: {
            authorization: `Bearer ${token}`,
            accept: "text/event-stream",
            ...(body !== undefined ? { "content-type": "application/json" } : {}),
            ...headers
          }
        })
        request.on("response", (response) => resume(Effect.succeed({ response, request })))
        request.on("error", (e) => resume(Effect.die(e)))
        request.end(body !== undefined ? JSON.stringify(body) : undefined)
      }),
      ({ request }) => Effect.sync(() => request.destroy())
    )
    const { response: res } = response
    res.setEncoding("utf8")
    res.on("data", (chunk: string) => {
      raw += chunk
      text += chunk
      let at: number
      while ((at = text.indexOf("\n\n")) >= 0) {
        const block = text.slice(0, at)
        text = text.slice(at + 2)
        let event = "message"
        let id: string | undefined
        const data: Array<string> = []
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim()
          else if (line.startsWith("id:")) id = line.slice(3).trim()
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""))
        }
        if (data.length > 0) {
          Queue.offerUnsafe(events, { event, data: data.join("\n"), ...(id !== undefined ? { id } : {}) })
        }
      }
    })
    const ended = Effect.callback<void>((resume) => {
      if (res.readableEnded) return resume(Effect.void)
      res.once("end", () => resume(Effect.void))
      res.once("close", () => resume(Effect.void))
    })
    res.once("end", () => Queue.offerUnsafe(events, undefined))
    res.once("close", () => Queue.offerUnsafe(events, undefined))
    const next = Queue.take(events)
    const rest = Effect.gen(function*() {
      const all: Array<SseEvent> = []
      while (true) {
        const event = yield* next
        if (event === undefined) return all
        all.push(event)
      }
    })
    return {
      status: res.statusCode ?? 0,
      headers: res.headers,
      next,
      rest,
      body: Effect.as(ended, raw).pipe(Effect.map(() => raw))
    } satisfies EventSource
  })

/** The bytes of the `stdout` (or `stderr`) events, decoded. */
export const outputOf = (events: ReadonlyArray<SseEvent>, stream: "stdout" | "stderr" = "stdout") =>
  events
    .filter((e) => e.event === stream)
    .map((e) => Buffer.from(JSON.parse(e.data).data as string, "base64").toString("utf8"))
    .join("")
