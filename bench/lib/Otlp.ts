/**
 * An OTLP/HTTP trace receiver (JSON encoding) for benchmarks that need to see where a request's
 * time goes across processes: roles started with `otlpEnv(url)` export every span here, and one
 * request is one trace through the API, the runtime and the agent (`@svc/bus/Trace`).
 */
import * as Http from "node:http"
import type * as Net from "node:net"
import { fmt } from "./Measure.ts"
import { median } from "./Stats.ts"

export interface Span {
  readonly service: string
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly name: string
  /** Milliseconds since the epoch (fractional). */
  readonly start: number
  readonly end: number
  readonly attributes: Readonly<Record<string, unknown>>
}

type OtlpValue = {
  readonly stringValue?: string
  readonly intValue?: string | number
  readonly boolValue?: boolean
  readonly doubleValue?: number
}
const valueOf = (v: OtlpValue): unknown => v.stringValue ?? v.intValue ?? v.boolValue ?? v.doubleValue
const nanosToMs = (nanos: string | number) => Number(BigInt(nanos) / 1000n) / 1000

export interface Receiver {
  readonly url: string
  readonly spans: Array<Span>
  readonly close: () => Promise<void>
}

export const startReceiver = (): Promise<Receiver> =>
  new Promise((resolve) => {
    const spans: Array<Span> = []
    const server = Http.createServer((request, response) => {
      const chunks: Array<Buffer> = []
      request.on("data", (chunk: Buffer) => chunks.push(chunk))
      request.on("end", () => {
        if (request.url === "/v1/traces" && request.method === "POST") {
          try {
            const body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
            for (const resourceSpan of body.resourceSpans ?? []) {
              const service = String(
                (resourceSpan.resource?.attributes ?? []).find((a: { key: string }) => a.key === "service.name")
                  ?.value?.stringValue
              )
              for (const scope of resourceSpan.scopeSpans ?? []) {
                for (const span of scope.spans ?? []) {
                  spans.push({
                    service,
                    traceId: span.traceId,
                    spanId: span.spanId,
                    parentSpanId: span.parentSpanId === "" ? undefined : span.parentSpanId,
                    name: span.name,
                    start: nanosToMs(span.startTimeUnixNano),
                    end: nanosToMs(span.endTimeUnixNano),
                    attributes: Object.fromEntries(
                      (span.attributes ?? []).map((a: { key: string; value: OtlpValue }) => [a.key, valueOf(a.value)])
                    )
                  })
                }
              }
            }
          } catch {
            // A malformed batch is the exporter's bug, not the benchmark's: dropped.
          }
        }
        response.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    server.listen(0, "127.0.0.1", () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as Net.AddressInfo).port}`,
        spans,
        close: () => new Promise<void>((done) => server.close(() => done()))
      }))
  })

/** The env a role needs to export its spans to `url` (JSON, what this receiver reads). */
export const otlpEnv = (url: string) => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: url,
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/json"
})

/** A span of time (ms since the epoch) to break down by the spans that ran in it. */
export interface Window {
  readonly start: number
  readonly end: number
}

/**
 * Per span name (`service name`), over `windows`: in how many windows it ran, the median time it
 * ran inside a window, and its median start from the window's (spans of every trace: a request's
 * own and what ran beside it). Longest first.
 */
export const spansInWindows = (spans: ReadonlyArray<Span>, windows: ReadonlyArray<Window>) => {
  const rows = new Map<string, { inside: Array<number>; offset: Array<number> }>()
  for (const w of windows) {
    const seen = new Map<string, { inside: number; offset: number }>()
    for (const span of spans) {
      if (span.end <= w.start || span.start >= w.end) continue
      const key = `${span.service.replace(/^svc-/, "")} ${span.name}`
      const inside = Math.min(span.end, w.end) - Math.max(span.start, w.start)
      const prior = seen.get(key)
      seen.set(key, {
        inside: (prior?.inside ?? 0) + inside,
        offset: Math.min(prior?.offset ?? Infinity, span.start - w.start)
      })
    }
    for (const [key, v] of seen) {
      const row = rows.get(key) ?? { inside: [], offset: [] }
      row.inside.push(v.inside)
      row.offset.push(v.offset)
      rows.set(key, row)
    }
  }
  return [...rows.entries()]
    .map(([key, row]) => ({ key, windows: row.inside.length, inside: median(row.inside), offset: median(row.offset) }))
    .sort((a, b) => b.inside - a.inside)
}

/** `spansInWindows` as a table of its first `most` rows, every line after `indent`. */
export const printSpansInWindows = (
  spans: ReadonlyArray<Span>,
  windows: ReadonlyArray<Window>,
  options: { readonly most: number; readonly indent: string }
) => {
  const { indent, most } = options
  console.log(`${indent}windows  ms inside  starts at  span`)
  for (const row of spansInWindows(spans, windows).slice(0, most)) {
    console.log(
      `${indent}${String(row.windows).padStart(7)}  ${fmt(row.inside).padStart(9)}  ${
        fmt(row.offset).padStart(9)
      }  ${row.key}`
    )
  }
}
