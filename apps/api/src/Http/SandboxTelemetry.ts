/**
 * Handlers of `GET /v1/sandboxes/{id}/logs` and `/metrics` (docs/contract.md#sandbox-logs-and-metrics),
 * read from the `SANDBOX_LOGS` and `SANDBOX_METRICS` streams (@svc/host-protocol/SandboxTelemetry)
 * through a consumer per request that lives as long as the answer. The middleware checked
 * `sandboxes:read`; each handler loads the org's sandbox (404 for another org's) and applies the
 * single-sandbox policy before reading.
 */
import { sandboxPolicy } from "@svc/auth/Authorization"
import { Nats } from "@svc/bus/Nats"
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import * as Errors from "@svc/domain/Errors"
import { MAX_METRIC_SAMPLES, parseSince } from "@svc/domain/SandboxTelemetry"
import { formatLine, readLines, readSamples } from "@svc/host-protocol/SandboxTelemetry"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { Clock, Effect, Stream } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { KEEP_ALIVE } from "./Events.ts"

const encoder = new TextEncoder()

const unavailable = () =>
  new Errors.Unavailable({ error: "The sandbox's log and metrics cannot be read right now; retry" })

const sinceOf = (text: string | undefined) =>
  Effect.gen(function*() {
    if (text === undefined) return undefined
    const since = parseSince(text, yield* Clock.currentTimeMillis)
    if (since === undefined) {
      return yield* new Errors.InvalidRequest({
        error: "since: an ISO 8601 time (2026-01-02T03:04:05Z) or a duration back from now (30s, 15m, 2h, 1d)"
      })
    }
    return since
  })

export const SandboxTelemetryGroup = HttpApiBuilder.group(
  Api,
  "sandboxTelemetry",
  Effect.fn(function*(handlers) {
    const sandboxes = yield* Sandboxes
    const nats = yield* Nats
    /** The sandbox, once it is the caller's org's and the policy allows it. */
    const target = (id: string) =>
      Effect.gen(function*() {
        const principal = yield* CurrentPrincipal
        const sandbox = yield* sandboxes.get(principal.orgId, id)
        yield* sandboxPolicy({ id: sandbox.id, parentId: sandbox.parentId })
      })
    return handlers
      .handle("logs", ({ headers, params, query }) =>
        Effect.gen(function*() {
          yield* target(params.id)
          const since = yield* sinceOf(query.since)
          const follow = query.follow === "true"
          const lastId = headers["last-event-id"]?.trim()
          if (lastId !== undefined && !/^\d{1,15}$/.test(lastId)) {
            return yield* new Errors.InvalidRequest({ error: "Last-Event-ID must be the id of a log line (digits)" })
          }
          const afterSeq = lastId === undefined ? undefined : Number(lastId)
          const lines = yield* readLines(params.id, { since, follow, afterSeq }).pipe(
            Effect.provideService(Nats, nats),
            Effect.mapError(unavailable)
          )
          if (!follow) {
            return HttpServerResponse.stream(
              lines.pipe(
                Stream.map((line) => encoder.encode(`${formatLine(line.entry)}\n`)),
                // The bus went away mid-answer: what was sent stands.
                Stream.catchCause(() => Stream.empty)
              ),
              { contentType: "text/plain; charset=utf-8", headers: { "cache-control": "no-cache" } }
            )
          }
          const body = Stream.concat(
            Stream.make(encoder.encode(": connected\n\n")),
            Stream.merge(
              lines.pipe(
                Stream.map((line) =>
                  encoder.encode(`id: ${line.seq}\nevent: log\ndata: ${formatLine(line.entry)}\n\n`)
                ),
                Stream.catchCause(() => Stream.empty)
              ),
              Stream.tick(KEEP_ALIVE).pipe(Stream.map(() => encoder.encode(": keep-alive\n\n"))),
              { haltStrategy: "left" }
            )
          )
          return HttpServerResponse.stream(body, {
            contentType: "text/event-stream",
            headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
          })
        }))
      .handle("metrics", ({ params, query }) =>
        Effect.gen(function*() {
          yield* target(params.id)
          const since = yield* sinceOf(query.since)
          const samples = yield* readSamples(params.id, { since, follow: false }).pipe(
            // The newest are what an answer cut at its bound keeps.
            Effect.flatMap(Stream.runCollect),
            Effect.map((all) => Array.from(all).slice(-MAX_METRIC_SAMPLES)),
            Effect.scoped,
            Effect.provideService(Nats, nats),
            Effect.mapError(unavailable)
          )
          return { samples }
        }))
  })
)

/** The group; needs the Sandboxes service (SandboxesHandlers builds it) and `Nats`. */
export const SandboxTelemetryHandlers = SandboxTelemetryGroup
