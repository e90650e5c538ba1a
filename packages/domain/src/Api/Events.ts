/**
 * Realtime events (docs/contract.md#realtime-events): `GET /v1/events` streams the org's events
 * as server-sent events. Any credential may open it; each event is sent only when the credential
 * can read what it is about (the handler decides per event), so the route itself asks for no
 * scope.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { InvalidEventFilter, InvalidRequest, Unavailable } from "../Errors.ts"
import { Bounded } from "../Text.ts"
import { Access } from "./Auth.ts"

export const EventsQuery = Schema.Struct({
  /** Comma-separated exact event names; absent: every event the credential may see. */
  events: Schema.optionalKey(Schema.String.check(Schema.isMaxLength(2048)))
})

export class EventsApi extends HttpApiGroup.make("events")
  .add(
    HttpApiEndpoint.get("stream", "/v1/events", {
      query: EventsQuery,
      headers: { "last-event-id": Schema.optionalKey(Bounded(256)) },
      success: HttpApiSchema.StreamUint8Array({ contentType: "text/event-stream" }),
      error: [InvalidRequest, InvalidEventFilter, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Server-sent events, one per event of the org as it happens: `id` (resume with " +
        "`Last-Event-ID`: the events after it that are still kept, 7 days), `event` (its name) and `data` (the " +
        "envelope). A comment line every 15 s keeps the connection open. `?events=a,b`: only those (exact names, " +
        "400 `invalid_event_filter` otherwise). A key sees the events of what it can read: `sandboxes:read` the " +
        "sandbox events (a `sandbox:<id>` key those of its sandbox and its direct children), `templates:read` the " +
        "template events, `*` and sessions every event."
    }))
  )
  .annotateMerge(Access.any)
  .annotateMerge(OpenApi.annotations({ title: "Events" }))
{}
