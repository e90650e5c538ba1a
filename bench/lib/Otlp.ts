/**
 * An OTLP/HTTP trace receiver (JSON encoding) for benchmarks that need to see where a request's
 * time goes across processes: roles started with `otlpEnv(url)` export every span here, and one
 * request is one trace through the API, the runtime and the agent (`@svc/bus/Trace`).
 */
import * as Http from "node:http"
import type * as Net from "node:net"

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
