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
import { type Context, Metric } from "effect"
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

/**
 * The templates without parameters, by their path (and that path with a trailing slash): most
 * requests a client repeats (`/v1/health`, `/v1/auth/me`, `/v1/sandboxes`) are found here without
 * trying each template's pattern in turn. A template of the path's own method found here is the
 * one the loop below would find first: no other template has more literal segments that match.
 */
const literal = (() => {
  const byPath = new Map<string, Array<Template>>()
  for (const template of templates) {
    if (template.literals !== template.path.split("/").filter((s) => s.length > 0).length) continue
    for (const path of [template.path, template.path === "/" ? "/" : `${template.path}/`]) {
      const list = byPath.get(path) ?? []
      if (!list.includes(template)) list.push(template)
      byPath.set(path, list)
    }
  }
  return byPath
})()

/** A path's first two segments (`/v1/sandboxes`), when both are there. */
const headOf = (path: string): string | undefined => {
  const second = path.indexOf("/", 1)
  if (second === -1 || second === path.length - 1) return undefined
  const third = path.indexOf("/", second + 1)
  return third === -1 ? path : path.slice(0, third)
}

/** The head of a template whose first two segments are both literal. */
const literalHead = (template: Template): string | undefined => {
  const head = headOf(template.path)
  return head === undefined || head.includes(":") || head.includes("*") ? undefined : head
}

/**
 * The templates a path can match, in the order of `templates`: those of its head (its first two
 * segments) and those whose head is not literal. A template of another literal head cannot match.
 */
const candidates = (() => {
  const anyHead = templates.filter((t) => literalHead(t) === undefined)
  const byHead = new Map<string, ReadonlyArray<Template>>()
  for (const template of templates) {
    const head = literalHead(template)
    if (head !== undefined && !byHead.has(head)) {
      byHead.set(head, templates.filter((t) => literalHead(t) === head || literalHead(t) === undefined))
    }
  }
  return (path: string): ReadonlyArray<Template> => {
    const head = headOf(path)
    return (head === undefined ? undefined : byHead.get(head)) ?? anyHead
  }
})()

/** The route template of a request path (no query), or `unmatched`. */
export const routeOf = (method: string, url: string): string => {
  const q = url.indexOf("?")
  const path = q === -1 ? url : url.slice(0, q)
  const exact = literal.get(path)
  if (exact !== undefined) {
    for (const template of exact) {
      if (template.method === method || (method === "HEAD" && template.method === "GET")) return template.path
    }
  }
  let samePath: string | undefined
  for (const template of candidates(path)) {
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

/** The counter and histogram of a label set (each made once). */
const seriesOf = (method: string, route: string, status: number) => {
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
  return { count, duration }
}

/**
 * Counts one answered request and its time, in a given context (its metric registry and
 * attributes): the API's middleware calls it once per request, so without an effect.
 */
export const observeUnsafe = (
  context: Context.Context<never>,
  method: string,
  route: string,
  status: number,
  seconds: number
): void => {
  const { count, duration } = seriesOf(method, route, status)
  count.updateUnsafe(1, context)
  duration.updateUnsafe(seconds, context)
}
