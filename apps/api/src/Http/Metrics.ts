/**
 * The API's request metrics and span names, by route template (`/v1/sandboxes/:id`, never the
 * id itself, so a label has as many values as the API has routes):
 * - `svc_http_requests_total{method, route, status}`: requests answered;
 * - `svc_http_request_duration_seconds{method, route}`: from the request to its response (a
 *   streamed body's time after its first byte is not counted).
 * A path no route declares is `route="unmatched"`. The templates come from the HttpApi
 * definition itself (and the few routes outside it), so a new endpoint is counted under its own.
 */
import { Api } from "@svc/domain/Api"
import { Effect, Metric } from "effect"
import type { HttpServerRequest } from "effect/http"
import { HttpApi } from "effect/http-api"

export const HttpRequests = Metric.counter("svc_http_requests_total", {
  description: "HTTP requests the API answered, by method, route template and status",
  incremental: true
})

export const HttpRequestDuration = Metric.histogram("svc_http_request_duration_seconds", {
  description: "Time from an HTTP request to its response, by method and route template",
  boundaries: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
})

interface Template {
  readonly method: string
  readonly path: string
  readonly pattern: RegExp
  /** Literal segments: the more, the more specific (tried first). */
  readonly literals: number
}

const compile = (method: string, path: string): Template => {
  const segments = path.split("/").filter((s) => s.length > 0)
  const source = segments.map((s) =>
    s === "*" ? "(?:/.*)?" : s.startsWith(":") ? "/[^/]+" : "/" + s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
  ).join("")
  return {
    method: method.toUpperCase(),
    path,
    pattern: new RegExp(`^${source === "" ? "/" : source}/?$`),
    literals: segments.filter((s) => !s.startsWith(":") && s !== "*").length
  }
}

/** Routes served beside the HttpApi (Server.ts, Terminal.ts). */
const OUTSIDE_THE_API: ReadonlyArray<readonly [string, string]> = [
  ["GET", "/v1/openapi.json"],
  ["GET", "/docs"],
  ["GET", "/terminal"]
]

const templates: ReadonlyArray<Template> = (() => {
  const all: Array<Template> = OUTSIDE_THE_API.map(([method, path]) => compile(method, path))
  HttpApi.reflect(Api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => {
      all.push(compile(endpoint.method, endpoint.path))
    }
  })
  return all.sort((a, b) => b.literals - a.literals)
})()

/** The route template of a request path (no query), or `unmatched`. */
export const routeOf = (method: string, url: string): string => {
  const q = url.indexOf("?")
  const path = q === -1 ? url : url.slice(0, q)
  let samePath: string | undefined
  for (const template of templates) {
    if (!template.pattern.test(path)) continue
    if (template.method === method || (method === "HEAD" && template.method === "GET")) return template.path
    samePath ??= template.path
  }
  // A route of another method (answered 405): still that route.
  return samePath ?? "unmatched"
}

/** The name of a request's server span: `POST /v1/sandboxes/:id/exec`. */
export const spanName = (request: HttpServerRequest.HttpServerRequest): string =>
  `${request.method} ${routeOf(request.method, request.url)}`

const requests = new Map<string, Metric.Counter<number>>()
const durations = new Map<string, Metric.Histogram<number>>()

/** Counts one answered request and its time (each label set is made once). */
export const observe = (method: string, route: string, status: number, seconds: number): Effect.Effect<void> => {
  const countKey = `${method} ${route} ${status}`
  let count = requests.get(countKey)
  if (count === undefined) {
    count = Metric.withAttributes(HttpRequests, { method, route, status: String(status) })
    requests.set(countKey, count)
  }
  const durationKey = `${method} ${route}`
  let duration = durations.get(durationKey)
  if (duration === undefined) {
    duration = Metric.withAttributes(HttpRequestDuration, { method, route })
    durations.set(durationKey, duration)
  }
  return Effect.andThen(Metric.update(count, 1), Metric.update(duration, seconds))
}
