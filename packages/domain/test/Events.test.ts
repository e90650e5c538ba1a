import { describe, expect, it } from "@effect/vitest"
import { DateTime, Result, Schema } from "effect"
import { InvalidEventFilter } from "../src/Errors.ts"
import * as Events from "../src/Events.ts"
import * as Ids from "../src/Ids.ts"
import { refusedAt } from "./helpers.ts"

const org = Ids.makeOrgId()
const ts = DateTime.makeUnsafe(Date.UTC(2026, 10, 22, 1, 2, 3, 456))

describe("Event envelopes", () => {
  it("encode to {event, org_id, ts, data} with the contract's data fields", () => {
    const sandbox_id = Ids.makeSandboxId()
    const host_id = Ids.makeHostId()
    const samples: ReadonlyArray<Events.Event> = [
      Events.makeEvent("sandbox.created", org, ts, {
        sandbox_id,
        host_id,
        template: Ids.BASE_TEMPLATE_ID,
        cpu: 1,
        ram_mb: 512,
        disk_gb: 1,
        via: "cold-boot"
      }),
      Events.makeEvent("sandbox.state_updated", org, ts, { sandbox_id, state: "running", internal_ip: "10.0.0.2" }),
      Events.makeEvent("sandbox.deleted", org, ts, { sandbox_id, host_id: null }),
      Events.makeEvent("template.state_updated", org, ts, {
        template_id: Ids.makeTemplateId(),
        state: "ready",
        image: "sha256:abc"
      }),
      Events.makeEvent("org.usage_alert", org, ts, { spend_micros: 1_000_000, alert_micros: 900_000 }),
      Events.makeEvent("org.usage_limit_reached", org, ts, {
        pct: 100,
        spend_micros: 5,
        limit_micros: 5,
        blocked: true
      }),
      Events.makeEvent("ping", org, ts, { webhook_id: Ids.makeWebhookId(), message: "ping from svc" })
    ]
    const expectedData: Record<Events.EventName, ReadonlyArray<string>> = {
      "sandbox.created": ["sandbox_id", "host_id", "template", "cpu", "ram_mb", "disk_gb", "via"],
      "sandbox.state_updated": ["sandbox_id", "state", "internal_ip"],
      "sandbox.deleted": ["sandbox_id", "host_id"],
      "template.state_updated": ["template_id", "state", "image"],
      "org.usage_alert": ["spend_micros", "alert_micros"],
      "org.usage_limit_reached": ["pct", "spend_micros", "limit_micros", "blocked"],
      "ping": ["webhook_id", "message"]
    }
    expect(samples.map((e) => e.event)).toEqual(Events.EVENT_NAMES)
    for (const event of samples) {
      const json = Schema.encodeSync(Events.Event)(event)
      expect(Object.keys(json)).toEqual(["event", "org_id", "ts", "data"])
      expect(json.ts).toBe("2026-11-22T01:02:03.456Z")
      expect(json.org_id).toBe(org)
      expect(Object.keys(json.data)).toEqual(expectedData[event.event])
      expect(Schema.decodeUnknownSync(Events.Event)(JSON.parse(JSON.stringify(json)))).toEqual(event)
    }
  })

  it("refuses bodies that do not match their event's data", () => {
    const base = { org_id: org, ts: "2026-11-22T01:02:03.456Z" }
    expect(
      refusedAt(Events.Event, { ...base, event: "sandbox.deleted", data: { sandbox_id: "x", host_id: null } }).length
    )
      .toBeGreaterThan(0)
    expect(refusedAt(Events.Event, { ...base, event: "nope", data: {} }).length).toBeGreaterThan(0)
    expect(
      refusedAt(Events.Event, {
        ...base,
        event: "org.usage_limit_reached",
        data: { pct: 75, spend_micros: 1, limit_micros: 1, blocked: false }
      }).length
    ).toBeGreaterThan(0)
    expect(
      refusedAt(Events.Event, {
        ...base,
        event: "template.state_updated",
        data: { template_id: Ids.makeTemplateId(), state: "building", image: null }
      }).length
    ).toBeGreaterThan(0)
  })
})

describe("Event filters", () => {
  const parse = (names: ReadonlyArray<string>) => Events.parseEventFilter(names)
  const rejected = (names: ReadonlyArray<string>): InvalidEventFilter => {
    const r = parse(names)
    if (Result.isSuccess(r)) throw new Error(`expected ${JSON.stringify(names)} to be rejected`)
    return r.failure
  }

  it("accepts exact names and *, deduplicated", () => {
    expect(Result.getOrThrow(parse(["*"]))).toEqual(["*"])
    expect(Result.getOrThrow(parse(["sandbox.created", "ping", "sandbox.created"]))).toEqual([
      "sandbox.created",
      "ping"
    ])
    expect(Result.getOrThrow(parse([...Events.EVENT_NAMES]))).toEqual(Events.EVENT_NAMES)
    expect(Events.DEFAULT_EVENT_FILTER).toEqual(["*"])
  })

  it("rejects patterns, unknown names, empty strings and an empty list", () => {
    expect(rejected(["sandbox.*"]).error).toContain("pattern")
    expect(rejected(["sandbox.created", "*.created"]).error).toContain("pattern")
    expect(rejected(["**"]).error).toContain("pattern")
    expect(rejected(["sandbox.exploded"]).error).toContain("not a known event")
    expect(rejected(["Sandbox.Created"]).error).toContain("not a known event")
    expect(rejected([" sandbox.created"]).error).toContain("not a known event")
    expect(rejected(["apikey.created"]).error).toContain("not a known event")
    expect(rejected([""]).error).toContain("empty")
    expect(rejected([]).error).toContain("at least one")
    expect(rejected(["x".repeat(100_000)]).error.length).toBeLessThan(400)
    expect(rejected(Array.from({ length: 33 }, () => "*")).error).toContain("at most 32")
    expect(rejected([1 as unknown as string]).error).toContain("strings")
    expect(rejected(["sandbox.*"])).toBeInstanceOf(InvalidEventFilter)
  })

  it("matches exact names, and * matches everything including ping", () => {
    expect(Events.matchesFilter(["*"], "ping")).toBe(true)
    expect(Events.matchesFilter(["*"], "org.usage_alert")).toBe(true)
    expect(Events.matchesFilter(["sandbox.created"], "sandbox.created")).toBe(true)
    expect(Events.matchesFilter(["sandbox.created"], "sandbox.deleted")).toBe(false)
    expect(Events.matchesFilter(["sandbox.created"], "ping")).toBe(false)
    expect(Events.matchesFilter(["ping"], "ping")).toBe(true)
  })
})
