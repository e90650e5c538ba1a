/**
 * Handler of GET /v1/events (docs/contract.md#realtime-events): the org's events from the
 * `EVENTS` stream as server-sent events, each sent only when the credential can read what it is
 * about: `sandboxes:read` the sandbox events (a `sandbox:<id>` key those of its sandbox and its
 * direct children, `Confinement.eventVisible`, a sandbox's parent looked up once per connection), `templates:read` the
 * template events, full access (`*`, sessions) every event. The consumer lives as long as the
 * response (the request's scope).
 */
import { Api } from "@svc/domain/Api"
import { CurrentPrincipal } from "@svc/domain/Api/Auth"
import * as Confinement from "@svc/domain/Confinement"
import * as Errors from "@svc/domain/Errors"
import { matchesFilter, parseEventFilter } from "@svc/domain/Events"
import * as Scopes from "@svc/domain/Scopes"
import * as Realtime from "@svc/events/Realtime"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { Effect, Result, Stream } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"

/** A comment line this often keeps proxies and clients from closing an idle stream. */
export const KEEP_ALIVE = "15 seconds"

const encoder = new TextEncoder()

/** One server-sent event: its sequence as `id`, its name as `event`, the envelope as `data`. */
const frame = (event: Realtime.StreamedEvent) =>
  encoder.encode(
    `id: ${event.seq}\nevent: ${event.name}\n${event.json.split("\n").map((line) => `data: ${line}`).join("\n")}\n\n`
  )

export const EventsGroup = HttpApiBuilder.group(
  Api,
  "events",
  Effect.fn(function*(handlers) {
    const sandboxes = yield* Sandboxes
    return handlers.handle("stream", ({ headers, query }) =>
      Effect.gen(function*() {
        const principal = yield* CurrentPrincipal
        const { grant, orgId } = principal
        const names = query.events === undefined ? ["*"] : query.events.split(",").map((name) => name.trim())
        const filter = yield* Result.match(parseEventFilter(names), {
          onSuccess: Effect.succeed,
          onFailure: Effect.fail
        })
        const lastId = headers["last-event-id"]
        if (lastId !== undefined && !/^\d{1,15}$/.test(lastId.trim())) {
          return yield* new Errors.InvalidRequest({ error: "Last-Event-ID must be the id of an event (digits)" })
        }

        // A `sandbox:<id>` key: the parents of the sandboxes its events are about, looked up once.
        const parents = new Map<string, string | null>()
        const parentOf = (sandboxId: string) =>
          parents.has(sandboxId)
            ? Effect.succeed(parents.get(sandboxId) ?? null)
            : sandboxes.get(orgId, sandboxId).pipe(
              Effect.map((s) => s.parentId),
              Effect.orElseSucceed(() => null),
              Effect.tap((parent) => Effect.sync(() => parents.set(sandboxId, parent)))
            )
        const visible = (event: Realtime.StreamedEvent): Effect.Effect<boolean> => {
          if (!matchesFilter(filter, event.name)) return Effect.succeed(false)
          if (grant.full) return Effect.succeed(true)
          if (event.name.startsWith("sandbox.")) {
            if (!Scopes.allows(grant, "sandboxes", "read")) return Effect.succeed(false)
            return Confinement.eventVisible(grant.sandboxId, event.data, parentOf)
          }
          if (event.name.startsWith("template.")) return Effect.succeed(Scopes.allows(grant, "templates", "read"))
          return Effect.succeed(false)
        }

        const events = yield* Realtime.follow(orgId, lastId === undefined ? undefined : Number(lastId.trim())).pipe(
          Effect.mapError(() => new Errors.Unavailable({ error: "The event stream cannot be read right now; retry" }))
        )
        const body = Stream.concat(
          // The consumer exists: whatever happens from now on is sent.
          Stream.make(encoder.encode(": connected\n\n")),
          Stream.merge(
            events.pipe(
              Stream.filterEffect(visible),
              Stream.map(frame),
              // The bus went away mid-stream: the client reconnects with its last id.
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
  })
)
