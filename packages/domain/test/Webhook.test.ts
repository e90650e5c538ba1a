import { describe, expect, it } from "@effect/vitest"
import { DateTime, Result, Schema } from "effect"
import * as Ids from "../src/Ids.ts"
import * as Webhook from "../src/Webhook.ts"
import { ok, refusedAt } from "./helpers.ts"

const t0 = DateTime.makeUnsafe(Date.UTC(2026, 10, 22, 1, 2, 3, 456))
const later = DateTime.makeUnsafe(Date.UTC(2026, 10, 23))

describe("Webhook", () => {
  it("decodes create and patch bodies", () => {
    expect(ok(Webhook.CreateWebhookRequest, { url: "https://example.com/hook" })).toEqual({
      url: "https://example.com/hook",
      events: ["*"],
      enabled: true
    })
    expect(ok(Webhook.CreateWebhookRequest, { url: "u", secret: "s".repeat(16), enabled: false }).secret).toBe(
      "s".repeat(16)
    )
    expect(refusedAt(Webhook.CreateWebhookRequest, { url: "u", secret: "s".repeat(15) })).toEqual(["secret"])
    expect(refusedAt(Webhook.CreateWebhookRequest, { url: "u", secret: "s".repeat(257) })).toEqual(["secret"])
    expect(refusedAt(Webhook.CreateWebhookRequest, { url: "u", secret: "with a space 1234" })).toEqual(["secret"])
    expect(refusedAt(Webhook.CreateWebhookRequest, {})).toEqual(["url"])
    expect(ok(Webhook.PatchWebhookRequest, { enabled: false })).toEqual({ enabled: false })
    expect(refusedAt(Webhook.PatchWebhookRequest, { enabled: "no" })).toEqual(["enabled"])
  })

  it("checks url syntax: http(s), host, no credentials or fragment", () => {
    const good = (u: string) => Result.getOrThrow(Webhook.parseWebhookUrl(u)).href
    const bad = (u: string) => {
      const r = Webhook.parseWebhookUrl(u)
      return Result.isFailure(r) && r.failure.code
    }
    expect(good("https://example.com/hook?x=1")).toBe("https://example.com/hook?x=1")
    expect(good("http://127.0.0.1:8080/")).toBe("http://127.0.0.1:8080/")
    expect(good("HTTPS://EXAMPLE.com")).toBe("https://example.com/")
    for (
      const u of [
        "",
        "example.com/hook",
        "ftp://example.com",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "http://user:pw@example.com",
        "https://example.com/#frag",
        " https://example.com",
        "https://" + "a".repeat(2048) + ".com",
        "http://"
      ]
    ) expect(bad(u), u).toBe("invalid_webhook_url")
  })

  it("encodes records and delivery attempts", () => {
    const hook = {
      id: Ids.makeWebhookId(),
      url: "https://example.com/hook",
      events: ["*", "ping"] as const,
      enabled: true,
      createdAt: t0,
      updatedAt: t0
    }
    expect(Object.keys(Schema.encodeSync(Webhook.Webhook)(hook))).toEqual([
      "id",
      "url",
      "events",
      "enabled",
      "createdAt",
      "updatedAt"
    ])
    expect(Schema.encodeSync(Webhook.CreatedWebhook)({ ...hook, secret_returned_once: "s" }).secret_returned_once).toBe(
      "s"
    )
    const attempt = {
      id: Ids.makeAttemptId(),
      delivery_id: Ids.makeDeliveryId(),
      event: "sandbox.created" as const,
      attempt: 2,
      status: "failed" as const,
      response_code: 500,
      error: "HTTP 500",
      duration_ms: 31,
      createdAt: t0,
      next_attempt_at: later
    }
    const json = Schema.encodeSync(Webhook.DeliveryAttempt)(attempt)
    expect(Object.keys(json)).toEqual([
      "id",
      "delivery_id",
      "event",
      "attempt",
      "status",
      "response_code",
      "error",
      "duration_ms",
      "createdAt",
      "next_attempt_at"
    ])
    expect(refusedAt(Webhook.DeliveryAttempt, { ...json, attempt: 7 })).toEqual(["attempt"])
    expect(refusedAt(Webhook.DeliveryAttempt, { ...json, status: "done" })).toEqual(["status"])
    expect(ok(Webhook.ListDeliveriesQuery, { status: "dead_letter" })).toEqual({
      limit: 50,
      offset: 0,
      status: "dead_letter"
    })
    expect(refusedAt(Webhook.ListDeliveriesQuery, { status: "nope" })).toEqual(["status"])
  })

  it("retries only failed and dead_letter deliveries", () => {
    expect(Webhook.DELIVERY_STATUSES.filter(Webhook.isRetryable)).toEqual(["failed", "dead_letter"])
  })
})
