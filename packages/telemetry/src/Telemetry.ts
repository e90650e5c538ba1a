/**
 * A role's telemetry, from its settings (Config.ts):
 * - traces: with `OTEL_EXPORTER_OTLP_ENDPOINT`, every span (the `Effect.fn` names, the HTTP
 *   server's request spans, the consumer spans of `@svc/bus/Trace`) is exported over OTLP/HTTP to
 *   `<endpoint>/v1/traces` (`OTEL_EXPORTER_OTLP_PROTOCOL`: protobuf or JSON) under the role's
 *   service name (`svc-api`, `svc-runtime`, `svc-dispatcher`, `svc-agent`; `OTEL_SERVICE_NAME`
 *   overrides), in batches every 5 s and at stop. Without it Effect's native tracer stays: spans
 *   go nowhere and messages carry no trace context;
 * - logs: JSON lines with `SVC_LOG_FORMAT=json` (Logger.ts);
 * - metrics: `/metrics` on `SVC_METRICS_PORT` (Metrics.ts).
 *
 * Provide it to the role's layer (`Layer.provide(Telemetry.layer("svc-api"))`): everything the
 * role builds and forks then has its tracer and logger.
 */
import { Effect, Layer, Option } from "effect"
import { FetchHttpClient } from "effect/http"
import { type OtlpExporter, OtlpSerialization, OtlpTracer } from "effect/observability"
import * as Os from "node:os"
import { LogFormat, OtlpEndpoint, OtlpProtocol, ServiceName } from "./Config.ts"
import { jsonLayer } from "./Logger.ts"
import * as Metrics from "./Metrics.ts"

export type RoleService = "svc-api" | "svc-runtime" | "svc-dispatcher" | "svc-agent"

/** The service name spans and log lines carry: `OTEL_SERVICE_NAME`, else the role's. */
export const serviceName = (role: RoleService) => Effect.map(ServiceName, Option.getOrElse(() => role))

/** The OTLP trace exporter, or nothing when no endpoint is set. */
export const tracerLayer = (role: RoleService) =>
  Layer.unwrap(Effect.gen(function*() {
    // Every setting read, used or not: a bad value stops the role whatever the others say.
    const endpoint = yield* OtlpEndpoint
    const protocol = yield* OtlpProtocol
    const name = yield* serviceName(role)
    // The tracer is an output of its layer (a reference in the context, not in the type).
    if (Option.isNone(endpoint)) return Layer.empty as Layer.Layer<OtlpExporter.Flusher>
    return OtlpTracer.layer({
      url: `${endpoint.value.replace(/\/+$/, "")}/v1/traces`,
      resource: {
        serviceName: name,
        attributes: { "service.namespace": "svc", "service.instance.id": `${Os.hostname()}:${process.pid}` }
      }
    }).pipe(
      Layer.provide(protocol === "http/json" ? OtlpSerialization.layerJson : OtlpSerialization.layerProtobuf),
      Layer.provide(FetchHttpClient.layer)
    )
  }))

/** JSON lines with `SVC_LOG_FORMAT=json`, else Effect's default logger. */
export const loggerLayer = (role: RoleService) =>
  Layer.unwrap(Effect.gen(function*() {
    const format = yield* LogFormat
    const name = yield* serviceName(role)
    return format === "json" ? jsonLayer(name) : Layer.empty
  }))

/**
 * Traces, logs and the `/metrics` listener of a role. The listener is the one value
 * `Metrics.layer` (given the role's logger), built once per process: the roles of `svc dev`
 * share it.
 */
export const layer = (role: RoleService) =>
  Layer.mergeAll(tracerLayer(role), loggerLayer(role), Metrics.layer.pipe(Layer.provide(loggerLayer(role))))
