import { describe, expect, it } from "@effect/vitest"
import { DateTime, Result, Schema } from "effect"
import * as ApiKey from "../src/ApiKey.ts"
import * as Audit from "../src/Audit.ts"
import * as Ids from "../src/Ids.ts"
import * as Org from "../src/Org.ts"
import * as Webhook from "../src/Webhook.ts"
import { ok, refusedAt } from "./helpers.ts"

const t0 = DateTime.makeUnsafe(Date.UTC(2026, 10, 22, 1, 2, 3, 456))
const later = DateTime.makeUnsafe(Date.UTC(2026, 10, 23))

describe("ApiKey", () => {
  it("encodes a row with spec.md 2.1's fields and the created response with token", () => {
    const row: ApiKey.ApiKeyRow = {
      id: Ids.makeApiKeyId(),
      prefix: "svc_live_abcdefgh",
      name: "ci",
      scopes: ["sandboxes:read"],
      createdAt: t0,
      lastUsedAt: null,
      expiresAt: later,
      revokedAt: null
    }
    const json = Schema.encodeSync(ApiKey.ApiKeyRow)(row)
    expect(Object.keys(json)).toEqual(["id", "prefix", "name", "scopes", "createdAt", "lastUsedAt", "expiresAt", "revokedAt"])
    expect(json.expiresAt).toBe("2026-11-23T00:00:00.000Z")
    const created = Schema.encodeSync(ApiKey.CreatedApiKey)({ ...row, token: "svc_live_x" })
    expect(created.token).toBe("svc_live_x")
    const list = Schema.encodeSync(ApiKey.ApiKeyList)({ keys: [row], total: 1, offset: 0, limit: 50, has_more: false })
    expect(Object.keys(list)).toEqual(["keys", "total", "offset", "limit", "has_more"])
  })

  it("decodes the create body with defaults", () => {
    expect(ok(ApiKey.CreateApiKeyRequest, { name: "ci" })).toEqual({ name: "ci", scopes: ["*"], expires_at: null })
    expect(refusedAt(ApiKey.CreateApiKeyRequest, {})).toEqual(["name"])
    expect(refusedAt(ApiKey.CreateApiKeyRequest, { name: "" })).toEqual(["name"])
    expect(refusedAt(ApiKey.CreateApiKeyRequest, { name: "x".repeat(121) })).toEqual(["name"])
    expect(refusedAt(ApiKey.CreateApiKeyRequest, { name: "ci", scopes: "*" })).toEqual(["scopes"])
    expect(refusedAt(ApiKey.CreateApiKeyRequest, { name: "ci", expires_at: "tomorrow" })).toEqual(["expires_at"])
  })

  it("validates scopes and a future expiry against a given now", () => {
    const body = (extra: object) => ok(ApiKey.CreateApiKeyRequest, { name: "ci", ...extra })
    const good = ApiKey.validateCreateApiKey(body({ scopes: ["apps:read"], expires_at: "2026-11-23T00:00:00Z" }), t0)
    expect(Result.isSuccess(good) && good.success.grant.tokens).toEqual(["apps:read"])
    const scope = ApiKey.validateCreateApiKey(body({ scopes: ["sandboxes:use"] }), t0)
    expect(Result.isFailure(scope) && scope.failure.code).toBe("invalid_scope")
    const past = ApiKey.validateCreateApiKey(body({ expires_at: "2026-11-22T01:02:03.456Z" }), t0)
    expect(Result.isFailure(past) && past.failure.code).toBe("invalid_request")
    if (Result.isFailure(past) && past.failure._tag === "InvalidRequest") {
      expect(past.failure.issues).toEqual([{ path: "expires_at", message: "must be in the future" }])
    }
    const never = ApiKey.validateCreateApiKey(body({}), t0)
    expect(Result.isSuccess(never) && never.success.expiresAt).toBeNull()
  })

  it("derives active, revoked and expired", () => {
    expect(ApiKey.apiKeyStatus({ revokedAt: null, expiresAt: null }, later)).toBe("active")
    expect(ApiKey.apiKeyStatus({ revokedAt: null, expiresAt: later }, t0)).toBe("active")
    expect(ApiKey.apiKeyStatus({ revokedAt: null, expiresAt: later }, later)).toBe("expired")
    expect(ApiKey.apiKeyStatus({ revokedAt: t0, expiresAt: later }, t0)).toBe("revoked")
    expect(ApiKey.apiKeyStatus({ revokedAt: t0, expiresAt: t0 }, later)).toBe("revoked")
  })
})

describe("Org", () => {
  it("encodes org and me, and checks sign-up", () => {
    const org = { id: Ids.makeOrgId(), name: "Acme", createdAt: t0 }
    expect(Schema.encodeSync(Org.Org)(org)).toEqual({ id: org.id, name: "Acme", createdAt: "2026-11-22T01:02:03.456Z" })
    const me = Schema.encodeSync(Org.Me)({
      org: { id: org.id, name: "Acme" },
      user: null,
      credential: { type: "api_key", id: Ids.makeApiKeyId(), scopes: ["*"], expiresAt: null }
    })
    expect(me.user).toBeNull()
    expect(ok(Org.SignUpRequest, { email: "a@b.c", password: "12345678", org_name: "Acme" }).org_name).toBe("Acme")
    expect(refusedAt(Org.SignUpRequest, { email: "nope", password: "1234567", org_name: "" })).toEqual([
      "email",
      "password",
      "org_name"
    ])
    expect(refusedAt(Org.PatchOrgRequest, { name: "" })).toEqual(["name"])
  })
})

describe("Webhook", () => {
  it("decodes create and patch bodies", () => {
    expect(ok(Webhook.CreateWebhookRequest, { url: "https://example.com/hook" })).toEqual({
      url: "https://example.com/hook",
      events: ["*"],
      enabled: true
    })
    expect(ok(Webhook.CreateWebhookRequest, { url: "u", secret: "s".repeat(16), enabled: false }).secret).toBe("s".repeat(16))
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
    expect(Object.keys(Schema.encodeSync(Webhook.Webhook)(hook))).toEqual(["id", "url", "events", "enabled", "createdAt", "updatedAt"])
    expect(Schema.encodeSync(Webhook.CreatedWebhook)({ ...hook, secret_returned_once: "s" }).secret_returned_once).toBe("s")
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
      "id", "delivery_id", "event", "attempt", "status", "response_code", "error", "duration_ms", "createdAt", "next_attempt_at"
    ])
    expect(refusedAt(Webhook.DeliveryAttempt, { ...json, attempt: 7 })).toEqual(["attempt"])
    expect(refusedAt(Webhook.DeliveryAttempt, { ...json, status: "done" })).toEqual(["status"])
    expect(ok(Webhook.ListDeliveriesQuery, { status: "dead_letter" })).toEqual({ limit: 50, offset: 0, status: "dead_letter" })
    expect(refusedAt(Webhook.ListDeliveriesQuery, { status: "nope" })).toEqual(["status"])
  })

  it("retries only failed and dead_letter deliveries", () => {
    expect(Webhook.DELIVERY_STATUSES.filter(Webhook.isRetryable)).toEqual(["failed", "dead_letter"])
  })
})

describe("Audit", () => {
  it("encodes entries and checks actions", () => {
    const entry = {
      id: Ids.makeAuditId(),
      action: Audit.AUDIT_ACTIONS.apiKeyCreated,
      actor: { type: "user" as const, id: Ids.makeUserId() },
      target_id: Ids.makeApiKeyId(),
      ip: "203.0.113.7",
      user_agent: "curl/8",
      createdAt: t0
    }
    const json = Schema.encodeSync(Audit.AuditEntry)(entry)
    expect(Object.keys(json)).toEqual(["id", "action", "actor", "target_id", "ip", "user_agent", "createdAt"])
    expect(json.action).toBe("apikey.created")
    expect(Audit.AUDIT_ACTIONS.apiKeyRevoked).toBe("apikey.revoked")
    expect(refusedAt(Audit.AuditEntry, { ...json, actor: { type: "robot", id: null } })).toEqual(["actor.type"])
    expect(ok(Audit.ListAuditQuery, { action: "apikey.revoked" }).action).toBe("apikey.revoked")
    expect(refusedAt(Audit.ListAuditQuery, { action: "drop table" })).toEqual(["action"])
  })
})
