/**
 * A sandbox's log and metrics (`sandbox.logs()`, `sandbox.metrics()`): the log as text or, with
 * `follow`, its lines as they are written; the samples taken every 5 s while it runs.
 */
import { chunks, type Http, sleep, SvcError } from "./Http.ts"
import { sseMessages } from "./Sse.ts"
import type * as T from "./Types.ts"

export interface LogsOptions {
  /** Only what came at or after this: a Date, an ISO 8601 time, or a duration back from now (`15m`, `2h`). */
  readonly since?: Date | string | undefined
  readonly signal?: AbortSignal | undefined
  /**
   * With `follow`: when the connection drops, connect again and resume after the last line
   * received (`Last-Event-ID`), so that no line is missed or repeated (default true).
   */
  readonly reconnect?: boolean | undefined
}

export interface MetricsOptions {
  /** As for `logs`. */
  readonly since?: Date | string | undefined
}

const sinceOf = (since: Date | string | undefined) => since instanceof Date ? since.toISOString() : since

/** The log so far: one line each, `<ts> <source>: <text>`. */
export const logsText = async (http: Http, path: string, options: LogsOptions): Promise<string> =>
  (await http.request("GET", path, {
    query: { since: sinceOf(options.since) },
    ...(options.signal !== undefined ? { signal: options.signal } : {})
  })).text()

/**
 * The log's lines (without their line end): those stored, then new ones until the signal aborts.
 * A dropped connection (or an outage: 429, 5xx) is followed by a new one resuming after the last
 * line received, unless `reconnect` is false; the sandbox gone (404 on a reconnect) ends it.
 */
export async function* followLogs(http: Http, path: string, options: LogsOptions): AsyncGenerator<string> {
  let lastEventId: string | undefined
  let delay = 250
  let connected = false
  for (;;) {
    try {
      const response = await http.request("GET", path, {
        // `since` only on the first connection: a resume starts after the last line seen.
        query: { follow: "true", since: lastEventId === undefined ? sinceOf(options.since) : undefined },
        headers: { accept: "text/event-stream", "last-event-id": lastEventId },
        ...(options.signal !== undefined ? { signal: options.signal } : {})
      })
      connected = true
      delay = 250
      for await (const message of sseMessages(chunks(response))) {
        if (message.event !== "log") continue
        if (message.id !== "") lastEventId = message.id
        yield message.data
      }
    } catch (error) {
      if (options.signal?.aborted === true) return
      if (error instanceof SvcError && error.status === 404 && connected) return
      // A refusal (a bad `since`, a revoked key) will not heal by retrying; a cut connection or
      // an outage may.
      if (error instanceof SvcError && error.status >= 400 && error.status < 500 && error.status !== 429) {
        throw error
      }
      if (!(error instanceof SvcError) && !(error instanceof TypeError)) throw error
    }
    if (options.reconnect === false || options.signal?.aborted === true) return
    await sleep(delay, options.signal)
    delay = Math.min(delay * 2, 5000)
  }
}

/** The samples, oldest first. */
export const metricSamples = async (
  http: Http,
  path: string,
  options: MetricsOptions
): Promise<ReadonlyArray<T.MetricSample>> =>
  (await http.json<{ samples: ReadonlyArray<T.MetricSample> }>("GET", path, {
    query: { since: sinceOf(options.since) }
  })).samples
