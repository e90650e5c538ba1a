/**
 * A sandbox's log and metrics (`sandbox.logs()`, `sandbox.metrics()`): the log as text or, with
 * `follow`, its lines as they are written; the samples taken every 5 s while it runs.
 */
import { chunks, type Http } from "./Http.ts"
import { sseMessages } from "./Sse.ts"
import type * as T from "./Types.ts"

export interface LogsOptions {
  /** Only what came at or after this: a Date, an ISO 8601 time, or a duration back from now (`15m`, `2h`). */
  readonly since?: Date | string | undefined
  readonly signal?: AbortSignal | undefined
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

/** The log's lines (without their line end): those stored, then new ones until the signal aborts or the stream ends. */
export async function* followLogs(http: Http, path: string, options: LogsOptions): AsyncGenerator<string> {
  const response = await http.request("GET", path, {
    query: { follow: "true", since: sinceOf(options.since) },
    headers: { accept: "text/event-stream" },
    ...(options.signal !== undefined ? { signal: options.signal } : {})
  })
  for await (const message of sseMessages(chunks(response))) {
    if (message.event === "log") yield message.data
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
