/**
 * Webhook events (docs/contract.md#envelope, #event-kinds): the envelope `{event, org_id, ts,
 * data}` and each event's data, plus the event filter of a webhook subscription.
 *
 * Filter rules: each entry is an exact event name or `*`; patterns (`sandbox.*`), unknown
 * names, empty strings and an empty list are `invalid_event_filter`; omitted means `["*"]`.
 * `ping` may be named; `*` matches it too. The test operation delivers its ping whatever the
 * filter says (that is the delivery path's rule, not the filter's).
 */
import { Result, Schema } from "effect"
import { InvalidEventFilter } from "./Errors.ts"
import { HostId, OrgId, SandboxId, TemplateId, WebhookId } from "./Ids.ts"
import { StopReason } from "./Lifecycle.ts"
import { SandboxState } from "./Sandbox.ts"
import { Timestamp } from "./Time.ts"

const Micros = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

export const SandboxCreatedData = Schema.Struct({
  sandbox_id: SandboxId,
  host_id: HostId,
  /** The template's id. */
  template: Schema.String,
  cpu: Count,
  ram_mb: Count,
  disk_gb: Count,
  via: Schema.Literals(["restore", "cold-boot"])
})

export const SandboxStateUpdatedData = Schema.Struct({
  sandbox_id: SandboxId,
  state: SandboxState,
  internal_ip: Schema.NullOr(Schema.String),
  /** Why it last stopped (the record's `stop_reason`); null while running. */
  reason: Schema.optionalKey(Schema.NullOr(StopReason))
})

export const SandboxDeletedData = Schema.Struct({
  sandbox_id: SandboxId,
  /** null for a sandbox deleted before it was placed on a host. */
  host_id: Schema.NullOr(HostId)
})

export const TemplateStateUpdatedData = Schema.Struct({
  template_id: TemplateId,
  state: Schema.Literals(["ready", "failed"]),
  /** `sha256:...` when ready, null when failed. */
  image: Schema.NullOr(Schema.String)
})

export const OrgUsageAlertData = Schema.Struct({
  spend_micros: Micros,
  alert_micros: Micros
})

export const USAGE_THRESHOLDS = [50, 80, 90, 100] as const

export const OrgUsageLimitReachedData = Schema.Struct({
  pct: Schema.Literals(USAGE_THRESHOLDS),
  spend_micros: Micros,
  limit_micros: Micros,
  /** true only at 100 percent or more. */
  blocked: Schema.Boolean
})

/** The synthetic event of the webhook test operation. */
export const PingData = Schema.Struct({
  webhook_id: WebhookId,
  message: Schema.String
})

/** Data schema per event name. */
export const EVENT_DATA = {
  "sandbox.created": SandboxCreatedData,
  "sandbox.state_updated": SandboxStateUpdatedData,
  "sandbox.deleted": SandboxDeletedData,
  "template.state_updated": TemplateStateUpdatedData,
  "org.usage_alert": OrgUsageAlertData,
  "org.usage_limit_reached": OrgUsageLimitReachedData,
  "ping": PingData
} as const

export type EventName = keyof typeof EVENT_DATA
export const EVENT_NAMES = Object.keys(EVENT_DATA) as ReadonlyArray<EventName>
export const EventName = Schema.Literals(EVENT_NAMES as [EventName, ...Array<EventName>])

export type EventData<N extends EventName> = (typeof EVENT_DATA)[N]["Type"]

const envelope = <const N extends EventName>(name: N) =>
  Schema.Struct({
    event: Schema.Literal(name),
    org_id: OrgId,
    ts: Timestamp,
    data: EVENT_DATA[name] as (typeof EVENT_DATA)[N]
  })

export const SandboxCreated = envelope("sandbox.created")
export const SandboxStateUpdated = envelope("sandbox.state_updated")
export const SandboxDeleted = envelope("sandbox.deleted")
export const TemplateStateUpdated = envelope("template.state_updated")
export const OrgUsageAlert = envelope("org.usage_alert")
export const OrgUsageLimitReached = envelope("org.usage_limit_reached")
export const Ping = envelope("ping")

/** Any event envelope; `event` discriminates. Encodes to the JSON body of a delivery. */
export const Event = Schema.Union([
  SandboxCreated,
  SandboxStateUpdated,
  SandboxDeleted,
  TemplateStateUpdated,
  OrgUsageAlert,
  OrgUsageLimitReached,
  Ping
])
export type Event = typeof Event.Type
export type EventOf<N extends EventName> = Extract<Event, { readonly event: N }>

/** Builds an envelope (the caller supplies the time, keeping this module clock-free). */
export const makeEvent = <N extends EventName>(
  event: N,
  orgId: OrgId,
  ts: Event["ts"],
  data: EventData<N>
): EventOf<N> => ({ event, org_id: orgId, ts, data }) as unknown as EventOf<N>

// Filters

/** `*` or an event name, as stored in a webhook's `events`. */
export const EventFilterEntry = Schema.Union([Schema.Literal("*"), EventName])
export type EventFilterEntry = typeof EventFilterEntry.Type
/** A validated, deduplicated subscription filter. */
export type EventFilter = ReadonlyArray<EventFilterEntry>

export const DEFAULT_EVENT_FILTER: EventFilter = ["*"]
export const MAX_FILTER_ENTRIES = 32

const isEntry = (s: string): s is EventFilterEntry => s === "*" || (EVENT_NAMES as ReadonlyArray<string>).includes(s)

const rejectEntry = (name: string) => {
  const shown = JSON.stringify(name.length > 60 ? name.slice(0, 60) + "..." : name)
  const why = name.length === 0
    ? "an empty name"
    : name.includes("*")
    ? "a pattern; use exact event names or \"*\""
    : "not a known event"
  return new InvalidEventFilter({
    error: `Invalid event filter entry ${shown}: ${why} (known: ${EVENT_NAMES.join(", ")})`
  })
}

/** Validates a webhook's `events`. */
export const parseEventFilter = (names: ReadonlyArray<string>): Result.Result<EventFilter, InvalidEventFilter> => {
  if (names.length === 0) {
    return Result.fail(new InvalidEventFilter({ error: "events must name at least one event; omit it for [\"*\"]" }))
  }
  if (names.length > MAX_FILTER_ENTRIES) {
    return Result.fail(new InvalidEventFilter({ error: `at most ${MAX_FILTER_ENTRIES} event filter entries` }))
  }
  const out: Array<EventFilterEntry> = []
  for (const name of names) {
    if (typeof name !== "string") return Result.fail(new InvalidEventFilter({ error: "event names must be strings" }))
    if (!isEntry(name)) return Result.fail(rejectEntry(name))
    if (!out.includes(name)) out.push(name)
  }
  return Result.succeed(out)
}

/** Whether a subscription with `filter` receives `event`. */
export const matchesFilter = (filter: EventFilter, event: EventName): boolean =>
  filter.includes("*") || filter.includes(event)
