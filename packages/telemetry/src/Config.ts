/**
 * The telemetry settings every role reads: where traces go (OTLP over HTTP), under which service
 * name, how logs are written, and where `/metrics` is served.
 */
import * as Env from "@svc/config/Env"
import { Config } from "effect"

/** The OTLP/HTTP base URL (`<url>/v1/traces`); unset: no trace leaves the process. */
export const OtlpEndpoint = Env.describe(Config.option(Config.String("OTEL_EXPORTER_OTLP_ENDPOINT")), {
  name: "OTEL_EXPORTER_OTLP_ENDPOINT",
  default: "unset",
  format: "URL"
})

/** How spans are encoded for the collector. */
export const OtlpProtocol = Env.describe(
  Config.Literals(["http/protobuf", "http/json"], "OTEL_EXPORTER_OTLP_PROTOCOL").pipe(
    Config.withDefault("http/protobuf" as const)
  ),
  { name: "OTEL_EXPORTER_OTLP_PROTOCOL", default: "`http/protobuf`", format: "protocol" }
)

/** The service name on every span (and JSON log line); unset: the role's (`svc-api`, ...). */
export const ServiceName = Env.describe(Config.option(Config.String("OTEL_SERVICE_NAME")), {
  name: "OTEL_SERVICE_NAME",
  default: "the role's: `svc-api`, `svc-runtime`, `svc-dispatcher`, `svc-agent`",
  format: "name"
})

/** `text` (Effect's default logger) or `json` (one JSON object per line, Logger.ts). */
export const LogFormat = Env.describe(
  Config.Literals(["text", "json"], "SVC_LOG_FORMAT").pipe(Config.withDefault("text" as const)),
  { name: "SVC_LOG_FORMAT", default: "`text`", format: "`text` or `json`" }
)

/** The port of this process's `/metrics` listener; unset: none. */
export const MetricsPort = Env.describe(Config.option(Config.Port("SVC_METRICS_PORT")), {
  name: "SVC_METRICS_PORT",
  default: "unset",
  format: "port"
})

/** Where the `/metrics` listener binds: loopback unless the scraper is on another machine. */
export const MetricsHost = Env.text("SVC_METRICS_HOST", "127.0.0.1", "address")

export const settings: ReadonlyArray<Env.AnySetting> = [
  OtlpEndpoint,
  OtlpProtocol,
  ServiceName,
  LogFormat,
  MetricsPort,
  MetricsHost
]
