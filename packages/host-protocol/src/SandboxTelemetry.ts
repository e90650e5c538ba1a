/**
 * A sandbox's log and metrics on the bus (docs/architecture.md#sandbox-logs-and-metrics): two
 * JetStream streams with a subject per sandbox, written by the hosts' agents (metric samples,
 * the template's `start_cmd` output, how a run ended) and the runtime (lifecycle lines from the
 * sandbox events), read by the API (`GET /v1/sandboxes/{id}/logs|metrics`).
 *
 * - `SANDBOX_METRICS`: `sbxmet.<sandboxId>.host.<hostId>`, 24 h, at most `METRIC_SAMPLES_KEPT`
 *   per subject.
 * - `SANDBOX_LOGS`: `sbxlog.<sandboxId>.host.<hostId>` (the agent's lines) and
 *   `sbxlog.<sandboxId>.ctl` (the control plane's), 7 days, at most `LOG_LINES_KEPT` per subject,
 *   lines cut at `MAX_LINE_CHARS`.
 *
 * A host's NATS user may publish only on subjects ending in its own host id, as its reports; a
 * sandbox's subjects are purged when it is deleted (`purgeSandbox`, by the runtime).
 */
import { AckPolicy, DeliverPolicy } from "@nats-io/jetstream"
import { consumeScoped } from "@svc/bus/Consume"
import { BusError, Nats } from "@svc/bus/Nats"
import { ensureStream, type StreamSpec } from "@svc/bus/Topology"
// One sample is stored as the API shows it.
import { MetricSample } from "@svc/domain/SandboxTelemetry"
import { Clock, Effect, Option, Schema, Stream } from "effect"

export const LOGS_STREAM = "SANDBOX_LOGS"
export const METRICS_STREAM = "SANDBOX_METRICS"

/** The default time between two metric samples of a running sandbox. */
export const METRICS_INTERVAL_MS = 5_000
/** How long samples are kept. */
export const METRICS_MAX_AGE_MS = 24 * 3600_000
/** Samples kept per sandbox and host: 24 h at the default interval, and a tenth more. */
export const METRIC_SAMPLES_KEPT = Math.ceil((METRICS_MAX_AGE_MS / METRICS_INTERVAL_MS) * 1.1)
/** How long log lines are kept. */
export const LOGS_MAX_AGE_MS = 7 * 24 * 3600_000
/** Log lines kept per sandbox and writer (the oldest go first): with `MAX_LINE_CHARS`, about 5 MiB at most. */
export const LOG_LINES_KEPT = 5_000
/** A longer line is cut here (and marked with `…`). */
export const MAX_LINE_CHARS = 1_024
/**
 * The `start_cmd` output lines a sandbox may log per second, on average over each sample
 * interval; what comes beyond is dropped and counted in a line of its own.
 */
export const START_LOG_LINES_PER_SECOND = 100

export const METRICS_STREAM_SPEC: StreamSpec = {
  name: METRICS_STREAM,
  subjects: ["sbxmet.>"],
  maxAgeMs: METRICS_MAX_AGE_MS,
  maxMsgsPerSubject: METRIC_SAMPLES_KEPT,
  maxMsgSize: 2_048
}

export const LOGS_STREAM_SPEC: StreamSpec = {
  name: LOGS_STREAM,
  subjects: ["sbxlog.>"],
  maxAgeMs: LOGS_MAX_AGE_MS,
  maxMsgsPerSubject: LOG_LINES_KEPT,
  maxMsgSize: 8_192
}

/** Where the agent of `hostId` writes a sandbox's samples and lines. */
export const metricSubject = (sandboxId: string, hostId: string) => `sbxmet.${sandboxId}.host.${hostId}`
export const hostLogSubject = (sandboxId: string, hostId: string) => `sbxlog.${sandboxId}.host.${hostId}`
/** Where the control plane writes a sandbox's lifecycle lines. */
export const controlLogSubject = (sandboxId: string) => `sbxlog.${sandboxId}.ctl`
/** The subjects an agent may publish on (NATS permissions). */
export const hostTelemetrySubjects = (hostId: string) => [`sbxmet.*.host.${hostId}`, `sbxlog.*.host.${hostId}`]
/** Every subject of one sandbox in each stream. */
export const sandboxMetricsFilter = (sandboxId: string) => `sbxmet.${sandboxId}.>`
export const sandboxLogsFilter = (sandboxId: string) => `sbxlog.${sandboxId}.>`

/** Who wrote a log line: the control plane (`lifecycle`), the host (`host`: how a run ended, drops), or the `start_cmd`. */
export const LogSource = Schema.Literals(["lifecycle", "host", "start_cmd"])
export type LogSource = typeof LogSource.Type

/** One line as stored. */
export const LogEntry = Schema.Struct({
  ts: Schema.String,
  source: LogSource,
  text: Schema.String
})
export type LogEntry = typeof LogEntry.Type

const MetricSampleJson = Schema.fromJsonString(MetricSample)
const LogEntryJson = Schema.fromJsonString(LogEntry)
const encodeSample = Schema.encodeSync(MetricSampleJson)
const encodeEntry = Schema.encodeSync(LogEntryJson)
const decodeSample = Schema.decodeUnknownOption(MetricSampleJson)
const decodeEntry = Schema.decodeUnknownOption(LogEntryJson)

/** `text` cut to `MAX_LINE_CHARS`, control characters but tabs shown as `?` (a line stays one line). */
export const cleanLine = (text: string) => {
  // eslint-disable-next-line no-control-regex
  const clean = text.replace(/[\x00-\x08\x0a-\x1f\x7f]/g, "?")
  return clean.length > MAX_LINE_CHARS ? `${clean.slice(0, MAX_LINE_CHARS - 1)}…` : clean
}

/** A line as `GET .../logs` shows it: `<ts> <source>: <text>`. */
export const formatLine = (entry: LogEntry) => `${entry.ts} ${entry.source}: ${entry.text}`

/**
 * The lifecycle lines' words: `stopped` takes the reason (`user`, `timeout`, `idle`, `oom`...)
 * when the control plane knows one.
 */
export type LifecycleLine =
  | { readonly _tag: "created"; readonly detail?: string }
  | { readonly _tag: "starting" }
  | { readonly _tag: "started" }
  | { readonly _tag: "stopping"; readonly reason?: string | null }
  | { readonly _tag: "stopped"; readonly reason?: string | null }
  | { readonly _tag: "error"; readonly reason?: string | null; readonly message?: string | null }
  | { readonly _tag: "out_of_memory"; readonly message: string }
  | { readonly _tag: "exited"; readonly message: string }
  | { readonly _tag: "deleting"; readonly reason?: string | null }

const withReason = (word: string, reason: string | null | undefined) =>
  reason === undefined || reason === null || reason === "" ? word : `${word} (reason: ${reason})`

export const lifecycleText = (line: LifecycleLine): string => {
  switch (line._tag) {
    case "created":
      return line.detail === undefined ? "created" : `created: ${line.detail}`
    case "starting":
    case "started":
      return line._tag
    case "stopping":
    case "stopped":
    case "deleting":
      return withReason(line._tag, line.reason)
    case "error":
      return `${withReason("error", line.reason)}${line.message ? `: ${line.message}` : ""}`
    case "out_of_memory":
      return `out of memory: ${line.message}`
    case "exited":
      return `exited: ${line.message}`
  }
}

export const ensureStreams = Effect.fn("SandboxTelemetry.ensureStreams")(function*() {
  yield* ensureStream(METRICS_STREAM_SPEC)
  yield* ensureStream(LOGS_STREAM_SPEC)
})

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/** Publishes one sample (subject relative to the prefix). */
export const publishSample = Effect.fn("SandboxTelemetry.publishSample")(function*(
  subject: string,
  sample: typeof MetricSample.Type
) {
  const nats = yield* Nats
  yield* nats.publishAcked(nats.subject(subject), encoder.encode(encodeSample(sample)), { traceparent: null })
})

/** Publishes log lines in order (subject relative to the prefix); `msgId` makes a repeat a duplicate. */
export const publishLines = Effect.fn("SandboxTelemetry.publishLines")(function*(
  subject: string,
  entries: ReadonlyArray<LogEntry>,
  msgId?: (index: number) => string
) {
  const nats = yield* Nats
  for (const [index, entry] of entries.entries()) {
    const clean = { ...entry, text: cleanLine(entry.text) }
    yield* nats.publishAcked(nats.subject(subject), encoder.encode(encodeEntry(clean)), {
      traceparent: null,
      ...(msgId !== undefined ? { msgId: msgId(index) } : {})
    })
  }
})

/** Removes every sample and line of a deleted sandbox. */
export const purgeSandbox = Effect.fn("SandboxTelemetry.purgeSandbox")(function*(sandboxId: string) {
  const nats = yield* Nats
  yield* Effect.tryPromise({
    try: async () => {
      await nats.jsm.streams.purge(nats.name(METRICS_STREAM), { filter: nats.subject(sandboxMetricsFilter(sandboxId)) })
      await nats.jsm.streams.purge(nats.name(LOGS_STREAM), { filter: nats.subject(sandboxLogsFilter(sandboxId)) })
    },
    catch: (cause) => new BusError({ operation: "purge sandbox telemetry", message: String(cause) })
  })
})

export interface ReadOptions {
  /** Only what was written at or after this time. */
  readonly since?: Date | undefined
  /** Keep the stream open with what comes next; otherwise it ends with what is stored. */
  readonly follow: boolean
  /**
   * Only what came after this stream sequence (a follower's `Last-Event-ID`): the sequences of
   * one sandbox's messages grow, so a reconnect resumes with neither a gap nor a repeat. It
   * replaces `since`: a duration back from now, taken again at a late reconnect, could skip
   * lines written after the last one seen.
   */
  readonly afterSeq?: number | undefined
}

/**
 * The messages of `filter` in `stream` (names relative to the prefix) in stream order, through
 * an ephemeral consumer of its own that lives as long as the scope. Without `follow` the
 * stream ends after the messages stored when it was opened (the consumer's pending count).
 */
const read = (stream: string, filter: string, options: ReadOptions) =>
  Effect.gen(function*() {
    const nats = yield* Nats
    const streamName = nats.name(stream)
    const now = yield* Clock.currentTimeMillis
    const info = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () =>
          nats.jsm.consumers.add(streamName, {
            ack_policy: AckPolicy.None,
            filter_subject: nats.subject(filter),
            mem_storage: true,
            num_replicas: 1,
            // A reader that died without deleting it: the server removes it.
            inactive_threshold: 60_000 * 1_000_000,
            ...(options.afterSeq !== undefined
              ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: options.afterSeq + 1 }
              : options.since === undefined
              ? { deliver_policy: DeliverPolicy.All }
              : options.since.getTime() > now
              // Nothing stored is that new; and the server takes a time past 2262 (int64
              // nanoseconds) as one long ago.
              ? { deliver_policy: DeliverPolicy.New }
              : { deliver_policy: DeliverPolicy.StartTime, opt_start_time: options.since.toISOString() })
          }),
        catch: (cause) => new BusError({ operation: `read ${stream}`, message: String(cause) })
      }),
      (info) => Effect.promise(() => nats.jsm.consumers.delete(streamName, info.name).catch(() => false))
    )
    const pending = info.num_pending
    if (!options.follow && pending === 0) return Stream.empty
    const consumer = yield* Effect.tryPromise({
      try: () => nats.js.consumers.get(streamName, info.name),
      catch: (cause) => new BusError({ operation: `read ${stream}`, message: String(cause) })
    })
    const messages = yield* consumeScoped(consumer, `read ${stream}`, { max_messages: 512 })
    const all = Stream.fromAsyncIterable(
      messages,
      (cause) => new BusError({ operation: `read ${stream}`, message: String(cause) })
    ).pipe(Stream.map((m) => ({ seq: m.seq, text: decoder.decode(m.data) })))
    return options.follow ? all : Stream.take(all, pending)
  })

/** A sandbox's samples (malformed ones skipped). */
export const readSamples = (sandboxId: string, options: ReadOptions) =>
  Effect.map(
    read(METRICS_STREAM, sandboxMetricsFilter(sandboxId), options),
    (messages) =>
      messages.pipe(
        Stream.map((m) => Option.getOrUndefined(decodeSample(m.text))),
        Stream.filter((sample): sample is typeof MetricSample.Type => sample !== undefined)
      )
  )

/** One stored line with its stream sequence. */
export interface StoredLine {
  readonly seq: number
  readonly entry: LogEntry
}

/** A sandbox's log lines with their stream sequence (malformed ones skipped). */
export const readLines = (sandboxId: string, options: ReadOptions) =>
  Effect.map(
    read(LOGS_STREAM, sandboxLogsFilter(sandboxId), options),
    (messages) =>
      messages.pipe(
        Stream.map((m): StoredLine | undefined => {
          const entry = decodeEntry(m.text)
          return Option.isSome(entry) ? { seq: m.seq, entry: entry.value } : undefined
        }),
        Stream.filter((line): line is StoredLine => line !== undefined)
      )
  )
