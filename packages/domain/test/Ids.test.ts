import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { TestClock } from "effect/testing"
import * as Ids from "../src/Ids.ts"

const makers: ReadonlyArray<readonly [string, () => string, Schema.Top]> = [
  ["org_", Ids.makeOrgId, Ids.OrgId],
  ["usr_", Ids.makeUserId, Ids.UserId],
  ["key_", Ids.makeApiKeyId, Ids.ApiKeyId],
  ["sbx_", Ids.makeSandboxId, Ids.SandboxId],
  ["tpl_", Ids.makeTemplateId, Ids.TemplateId],
  ["vol_", Ids.makeVolumeId, Ids.VolumeId],
  ["app_", Ids.makeAppId, Ids.AppId],
  ["sec_", Ids.makeSecretId, Ids.SecretId],
  ["wh_", Ids.makeWebhookId, Ids.WebhookId],
  ["whd_", Ids.makeDeliveryId, Ids.DeliveryId],
  ["wha_", Ids.makeAttemptId, Ids.AttemptId],
  ["aud_", Ids.makeAuditId, Ids.AuditId],
  ["host_", Ids.makeHostId, Ids.HostId]
]

describe("Ids", () => {
  it("makes ids with the right prefix that their own schema accepts", () => {
    for (const [prefix, make, schema] of makers) {
      const id = make()
      expect(id.startsWith(prefix)).toBe(true)
      expect(id.slice(prefix.length)).toMatch(/^[0-9a-hjkmnp-tv-z]{26}$/)
      expect(Schema.is(schema as Schema.Codec<unknown>)(id)).toBe(true)
    }
  })

  it("rejects ids of another kind and malformed bodies", () => {
    const sbx = Ids.makeSandboxId()
    const isSandbox = Schema.is(Ids.SandboxId)
    const isWebhook = Schema.is(Ids.WebhookId)
    expect(isSandbox(Ids.makeOrgId())).toBe(false)
    expect(isWebhook(Ids.makeDeliveryId())).toBe(false) // whd_ is not wh_
    expect(isSandbox(sbx.toUpperCase())).toBe(false)
    expect(isSandbox(sbx + "0")).toBe(false)
    expect(isSandbox(sbx.slice(0, -1))).toBe(false)
    expect(isSandbox(sbx.slice(0, -1) + "u")).toBe(false) // u is not Crockford
    expect(isSandbox("sbx_8" + sbx.slice(5))).toBe(false) // beyond 48-bit time
    expect(isSandbox("sbx_" + "é".repeat(26))).toBe(false)
    expect(isSandbox("")).toBe(false)
    expect(isSandbox(` ${sbx}`)).toBe(false)
    expect(isSandbox(42)).toBe(false)
  })

  it("sorts by creation time as strings, also within one millisecond", () => {
    const ids = Array.from({ length: 2000 }, () => Ids.makeId("sandbox"))
    expect(new Set(ids).size).toBe(ids.length)
    expect([...ids].sort()).toEqual(ids)
    const early = Ids.makeId("org", Date.UTC(2026, 0, 1))
    const later = Ids.makeId("org", Date.UTC(2026, 0, 2))
    expect(early < later).toBe(true)
  })

  it("encodes the creation time, readable back", () => {
    const t = Date.UTC(2028, 10, 22, 1, 2, 3, 456) // ahead of anything made so far in this process
    const id = Ids.makeId("sandbox", t)
    expect(Ids.timestampOf(id)).toBe(t)
    expect(Ids.timestampOf("nope")).toBeNull()
  })

  it("keeps order when the clock goes back", () => {
    const a = Ids.makeId("app", Date.UTC(2030, 0, 1))
    const b = Ids.makeId("app", Date.UTC(2029, 0, 1))
    expect(a < b).toBe(true)
  })

  it("has a well-formed fixed id for the base template", () => {
    expect(Schema.is(Ids.TemplateId)(Ids.BASE_TEMPLATE_ID)).toBe(true)
    expect(Ids.timestampOf(Ids.BASE_TEMPLATE_ID)).toBe(0)
  })

  it.effect("make() takes the time from the Effect clock", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.UTC(2031, 0, 1))
      const id = yield* Ids.make("webhook")
      expect(id.startsWith("wh_")).toBe(true)
      expect(Ids.timestampOf(id)).toBe(Date.UTC(2031, 0, 1))
    }))
})
