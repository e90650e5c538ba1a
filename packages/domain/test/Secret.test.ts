import { describe, expect, it } from "@effect/vitest"
import * as S from "../src/Secret.ts"
import { decode, ok, refusedAt } from "./helpers.ts"

const base = { name: "openai", value: "sk-test-123", allowed_hosts: ["api.openai.com"] }

describe("CreateSecretRequest", () => {
  it("applies the defaults: Authorization, Bearer {value}", () => {
    expect(ok(S.CreateSecretRequest, base)).toEqual({
      ...base,
      header_name: "Authorization",
      header_format: "Bearer {value}"
    })
  })

  it("normalises allowed hosts: lowercase, no trailing dot, duplicates once, order kept", () => {
    expect(
      ok(S.CreateSecretRequest, { ...base, allowed_hosts: ["API.Example.com", "*.x.org", "api.example.com."] })
        .allowed_hosts
    ).toEqual(["api.example.com", "*.x.org"])
  })

  it("refuses empty or bad hosts: addresses, single labels, *.tld, wildcards inside", () => {
    expect(refusedAt(S.CreateSecretRequest, { ...base, allowed_hosts: [] })).toEqual(["allowed_hosts"])
    expect(refusedAt(S.CreateSecretRequest, { ...base, allowed_hosts: ["10.0.0.1", "localhost", "*.com", "a.*.b"] }))
      .toEqual(["allowed_hosts.0", "allowed_hosts.1", "allowed_hosts.2", "allowed_hosts.3"])
    expect(refusedAt(S.CreateSecretRequest, { ...base, allowed_hosts: Array.from({ length: 101 }, () => "a.com") }))
      .toEqual(["allowed_hosts"])
  })

  it("refuses header names that are not tokens or that the proxy owns, formats without {value}", () => {
    for (const h of ["", "X Key", "X:Key", "Host", "content-length", "Connection", "Transfer-Encoding", "TE"]) {
      expect(refusedAt(S.CreateSecretRequest, { ...base, header_name: h }), h).toEqual(["header_name"])
    }
    expect(ok(S.CreateSecretRequest, { ...base, header_name: "X-Api-Key", header_format: "{value}" }).header_name)
      .toBe("X-Api-Key")
    expect(refusedAt(S.CreateSecretRequest, { ...base, header_format: "Bearer value" })).toEqual(["header_format"])
    expect(refusedAt(S.CreateSecretRequest, { ...base, header_format: "Bearer {value}\r\nX: y" })).toEqual([
      "header_format"
    ])
  })

  it("refuses empty, CR/LF, control characters and values over 64 KiB, never quoting the value", () => {
    const secret = "sk-canary-7f3a"
    for (
      const value of [
        "",
        `${secret}\r\nX-Injected: 1`,
        `${secret}\n`,
        `${secret}\u0000`,
        secret + "x".repeat(64 * 1024)
      ]
    ) {
      const r = decode(S.CreateSecretRequest, { ...base, value })
      expect(r.ok).toBe(false)
      if (r.ok) continue
      expect(r.issues.map((i) => i.path)).toEqual(["value"])
      expect(JSON.stringify(r.issues)).not.toContain(secret)
    }
    expect(ok(S.CreateSecretRequest, { ...base, value: "tab\tok ünï" }).value).toBe("tab\tok ünï")
    expect(ok(S.CreateSecretRequest, { ...base, value: "x".repeat(64 * 1024) }).value.length).toBe(64 * 1024)
  })
})

describe("PatchSecretRequest", () => {
  it("says when a patch needs secrets:use: allowed_hosts or header_name, not header_format", () => {
    expect(S.patchNeedsUse(ok(S.PatchSecretRequest, { header_format: "Token {value}" }))).toBe(false)
    expect(S.patchNeedsUse(ok(S.PatchSecretRequest, { header_name: "X-Key" }))).toBe(true)
    expect(S.patchNeedsUse(ok(S.PatchSecretRequest, { allowed_hosts: ["a.example.com"] }))).toBe(true)
    expect(refusedAt(S.PatchSecretRequest, { allowed_hosts: [] })).toEqual(["allowed_hosts"])
  })
})
