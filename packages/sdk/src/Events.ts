/**
 * Realtime events (`GET /v1/events`): the `EventStream` async iterator, and `waitThrough`, the
 * way the resources wait for a state: woken by the entity's events as they arrive rather than
 * by polling, with polling as the fallback when the stream cannot be had.
 */
import { chunks, type Http, sleep, SvcError, timeoutError } from "./Http.ts"
import { sseMessages } from "./Sse.ts"

/** One event of the org (`GET /v1/events`): the webhook envelope and the stream's `id`. */
export interface SvcEvent {
  /** Its sequence in the platform's event stream: resume after it with `lastEventId`. */
  readonly id: string
  readonly event: string
  readonly org_id: string
  readonly ts: string
  readonly data: Record<string, unknown>
}

export interface EventsOptions {
  /** Only these event names (exact). */
  readonly events?: ReadonlyArray<string> | undefined
  /** Start after this event (an `id` seen before); otherwise from now. */
  readonly lastEventId?: string | undefined
  /** Reconnect when the connection drops, resuming after the last event seen (default true). */
  readonly reconnect?: boolean | undefined
}

/**
 * The org's events as they happen, as an async iterator; it connects at once (`connected`
 * resolves when the server follows the stream: nothing after that is missed) and, when the
 * connection drops, reconnects with `Last-Event-ID` so no event is missed or repeated. Leaving a
 * `for await` loop (or `close()`) ends it.
 */
export class EventStream implements AsyncIterableIterator<SvcEvent> {
  readonly #http: Http
  readonly #options: EventsOptions
  readonly #abort = new AbortController()
  readonly #iterator: AsyncGenerator<SvcEvent>
  #lastEventId: string | undefined
  /** Resolves once the first connection is answered; rejects with its SvcError. */
  readonly connected: Promise<void>

  constructor(http: Http, options: EventsOptions) {
    this.#http = http
    this.#options = options
    this.#lastEventId = options.lastEventId
    const first = this.#open()
    this.connected = first.then(() => undefined)
    // Its failure reaches the caller through next(); this only keeps it from being "unhandled".
    this.connected.catch(() => undefined)
    this.#iterator = this.#run(first)
  }

  /** The `id` of the last event received (what a reconnection resumes after). */
  get lastEventId(): string | undefined {
    return this.#lastEventId
  }

  #open(): Promise<Response> {
    return this.#http.request("GET", "/v1/events", {
      query: { events: this.#options.events?.join(",") },
      headers: { accept: "text/event-stream", "last-event-id": this.#lastEventId },
      signal: this.#abort.signal
    })
  }

  async *#run(first: Promise<Response>): AsyncGenerator<SvcEvent> {
    let pending: Promise<Response> | undefined = first
    let delay = 250
    while (!this.#abort.signal.aborted) {
      try {
        const response: Response = await (pending ?? this.#open())
        pending = undefined
        delay = 250
        for await (const message of sseMessages(chunks(response))) {
          if (message.id !== "") this.#lastEventId = message.id
          const envelope = JSON.parse(message.data) as Omit<SvcEvent, "id">
          yield { id: message.id, ...envelope }
        }
      } catch (error) {
        pending = undefined
        if (this.#abort.signal.aborted) return
        // A refusal (a bad filter, a revoked key) will not heal by retrying; a cut connection or
        // an outage (429, 5xx) may.
        if (error instanceof SvcError && error.status >= 400 && error.status < 500 && error.status !== 429) {
          throw error
        }
        if (!(error instanceof SvcError) && !(error instanceof TypeError)) throw error
      }
      if (this.#options.reconnect === false || this.#abort.signal.aborted) return
      await sleep(delay, this.#abort.signal)
      delay = Math.min(delay * 2, 5000)
    }
  }

  next(): Promise<IteratorResult<SvcEvent>> {
    return this.#iterator.next()
  }

  return(): Promise<IteratorResult<SvcEvent>> {
    this.close()
    return this.#iterator.return(undefined)
  }

  [Symbol.asyncIterator](): this {
    return this
  }

  /** Ends the stream: the connection is closed, the iterator finishes. */
  close(): void {
    this.#abort.abort()
  }
}

export interface WaitThroughOptions<A> {
  /** The events that may mean a change (the stream's `?events=` filter). */
  readonly events: ReadonlyArray<string>
  /** Whether an event concerns what is waited for (its `sandbox_id`, ...). */
  readonly concerns: (event: SvcEvent) => boolean
  /** Reads the record. */
  readonly read: () => Promise<A>
  /** Whether the record is where the wait ends. */
  readonly done: (a: A) => boolean
  readonly timeoutMs: number
  /** The timeout's message: what was not reached. */
  readonly what: string
  readonly onProgress?: ((a: A) => void) | undefined
  /**
   * Read again after this long without a concerning event (default 5000 ms): for a record that
   * changes without an event of its own (an app follows its sandboxes' events).
   */
  readonly idleReadMs?: number | undefined
}

/** One waiter's view of a shared stream: the events that arrived since it joined, in order. */
interface Follower {
  readonly queue: Array<SvcEvent>
  wake: ((result: IteratorResult<SvcEvent> | "broken") => void) | undefined
  ended: IteratorResult<SvcEvent> | "broken" | undefined
}

/**
 * One `GET /v1/events` per client and filter, shared by every wait in progress on it: each wait
 * of its own opened a stream (a JetStream consumer on the server, ~10 ms of the API's CPU to
 * open) that carried every event of the org, so N creates waiting at once cost N streams and N²
 * events (bench/README.md, bench/tti.ts). Opened by the first waiter, closed when the last one
 * leaves; a waiter that joins an open stream misses nothing (it reads its record after joining).
 */
class SharedStream {
  readonly #stream: EventStream
  readonly #followers = new Set<Follower>()
  readonly #onEmpty: () => void
  readonly connected: Promise<boolean>

  constructor(http: Http, events: ReadonlyArray<string>, onEmpty: () => void) {
    this.#stream = new EventStream(http, { events })
    this.#onEmpty = onEmpty
    this.connected = this.#stream.connected.then(() => true, () => false)
    void this.#pump()
  }

  async #pump(): Promise<void> {
    let end: IteratorResult<SvcEvent> | "broken"
    try {
      for (;;) {
        const result = await this.#stream.next()
        if (result.done === true) {
          end = result
          break
        }
        for (const follower of this.#followers) {
          if (follower.wake !== undefined) {
            const wake = follower.wake
            follower.wake = undefined
            wake(result)
          } else follower.queue.push(result.value)
        }
      }
    } catch {
      end = "broken"
    }
    // Ended (closed, or refused): its followers poll from now on; a later waiter opens another.
    this.#onEmpty()
    for (const follower of this.#followers) {
      follower.ended = end
      const wake = follower.wake
      follower.wake = undefined
      wake?.(end)
    }
  }

  follow(): { readonly next: () => Promise<IteratorResult<SvcEvent> | "broken">; readonly leave: () => void } {
    const follower: Follower = { queue: [], wake: undefined, ended: undefined }
    this.#followers.add(follower)
    return {
      next: () => {
        const queued = follower.queue.shift()
        if (queued !== undefined) return Promise.resolve({ done: false, value: queued })
        if (follower.ended !== undefined) return Promise.resolve(follower.ended)
        return new Promise((resolve) => (follower.wake = resolve))
      },
      leave: () => {
        this.#followers.delete(follower)
        if (this.#followers.size === 0) {
          this.#onEmpty()
          this.#stream.close()
        }
      }
    }
  }
}

/** The shared streams of each client (its `Http`), by filter. */
const shared = new WeakMap<Http, Map<string, SharedStream>>()

const followShared = (http: Http, events: ReadonlyArray<string>) => {
  let streams = shared.get(http)
  if (streams === undefined) {
    streams = new Map()
    shared.set(http, streams)
  }
  const key = events.join(",")
  let stream = streams.get(key)
  if (stream === undefined) {
    const made: SharedStream = new SharedStream(http, events, () => {
      if (streams.get(key) === made) streams.delete(key)
    })
    streams.set(key, made)
    stream = made
  }
  return { connected: stream.connected, ...stream.follow() }
}

/**
 * Waits until `read()` answers a record that is `done`, reading it again each time an event
 * concerning it arrives: the stream is followed first, then the record read, so a change between
 * the two is not missed. The stream is shared with the client's other waits in progress
 * (`SharedStream`). When the stream cannot be had (the key may not read events, an old server)
 * or breaks, it polls instead (100 ms growing to 1 s).
 */
export const waitThrough = async <A>(http: Http, options: WaitThroughOptions<A>): Promise<A> => {
  const deadline = Date.now() + options.timeoutMs
  const check = (value: A) => {
    options.onProgress?.(value)
    return options.done(value)
  }
  const stream = followShared(http, options.events)
  let following = await stream.connected
  try {
    let value = await options.read()
    if (check(value)) return value
    let next: Promise<IteratorResult<SvcEvent> | "broken"> | undefined
    let delay = 100
    for (;;) {
      const left = deadline - Date.now()
      if (left <= 0) throw timeoutError(options.what, options.timeoutMs)
      if (following) {
        next ??= stream.next()
        // The timer goes with the race: a pending one would keep a finished program alive.
        const idle = new AbortController()
        const woken = await Promise.race([
          next.then(
            (r) => (r === "broken" ? r : r.done === true ? "ended" as const : r.value),
            () => "broken" as const
          ),
          sleep(Math.min(left, options.idleReadMs ?? 5000), idle.signal).then(() => "idle" as const)
        ])
        idle.abort()
        if (woken === "ended" || woken === "broken") following = false
        else if (woken !== "idle") {
          next = undefined
          if (!options.concerns(woken)) continue
        }
      } else {
        await sleep(Math.min(delay, left))
        delay = Math.min(delay * 2, 1000)
      }
      value = await options.read()
      if (check(value)) return value
    }
  } finally {
    stream.leave()
  }
}
