import { describe, expect, it } from "@effect/vitest"
import { Result } from "effect"
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

  it("takes the contract's entry forms: host, *.domain, host:port, http://host[:port]; stores them plainly", () => {
    const table: ReadonlyArray<readonly [string, string, S.SecretDestination]> = [
      ["api.example.com", "api.example.com", { scheme: "https", host: "api.example.com", port: 443 }],
      ["*.Example.com", "*.example.com", { scheme: "https", host: "*.example.com", port: 443 }],
      ["api.example.com:443", "api.example.com", { scheme: "https", host: "api.example.com", port: 443 }],
      ["api.example.com:8443", "api.example.com:8443", { scheme: "https", host: "api.example.com", port: 8443 }],
      ["https://api.example.com", "api.example.com", { scheme: "https", host: "api.example.com", port: 443 }],
      ["http://api.example.com", "http://api.example.com", { scheme: "http", host: "api.example.com", port: 80 }],
      ["http://api.example.com:80/", "http://api.example.com", { scheme: "http", host: "api.example.com", port: 80 }],
      ["HTTP://*.x.org:8080", "http://*.x.org:8080", { scheme: "http", host: "*.x.org", port: 8080 }],
      ["93.184.216.34", "93.184.216.34", { scheme: "https", host: "93.184.216.34", port: 443 }],
      ["[2606:4700::1111]:8443", "[2606:4700::1111]:8443", { scheme: "https", host: "2606:4700::1111", port: 8443 }],
      ["http://[2606:4700::1111]", "http://[2606:4700::1111]", { scheme: "http", host: "2606:4700::1111", port: 80 }]
    ]
    for (const [input, stored, parsed] of table) {
      expect(ok(S.CreateSecretRequest, { ...base, allowed_hosts: [input] }).allowed_hosts, input).toEqual([stored])
      expect(Result.getOrThrow(S.parseSecretDestination(stored)), input).toEqual(parsed)
    }
  })

  it("matches a request by scheme, port and host: HTTPS on 443 unless the entry says otherwise", () => {
    const entry = (text: string) => Result.getOrThrow(S.parseSecretDestination(text))
    const rows: ReadonlyArray<readonly [string, "https" | "http", string, number, boolean]> = [
      ["api.example.com", "https", "api.example.com", 443, true],
      ["api.example.com", "http", "api.example.com", 80, false],
      ["api.example.com", "https", "api.example.com", 8443, false],
      ["api.example.com:8443", "https", "api.example.com", 8443, true],
      ["api.example.com:8443", "https", "api.example.com", 443, false],
      ["http://api.example.com", "http", "api.example.com", 80, true],
      ["http://api.example.com", "https", "api.example.com", 443, false],
      ["http://api.example.com", "http", "api.example.com", 8080, false],
      ["*.example.com", "https", "a.b.example.com", 443, true],
      ["*.example.com", "https", "example.com", 443, false],
      ["api.example.com", "https", "api.example.com.evil.test", 443, false],
      ["93.184.216.34", "https", "93.184.216.34", 443, true],
      ["93.184.216.34", "https", "93.184.216.35", 443, false],
      ["[2606:4700::1111]", "https", "2606:4700:0::1111", 443, true]
    ]
    for (const [text, scheme, host, port, expected] of rows) {
      expect(S.secretDestinationMatches(entry(text), { scheme, host, port }), `${text} ${scheme}://${host}:${port}`)
        .toBe(expected)
    }
  })

  it("refuses empty or bad hosts: single labels, *.tld, wildcards inside, paths, other schemes, bad ports", () => {
    expect(refusedAt(S.CreateSecretRequest, { ...base, allowed_hosts: [] })).toEqual(["allowed_hosts"])
    const bad = [
      "localhost",
      "*.com",
      "a.*.b",
      "a.com/path",
      "ftp://a.com",
      "a.com:0",
      "a.com:99999",
      "u@a.com",
      "169.254.169.254",
      "10.0.0.1",
      "[fd00:ec2::254]"
    ]
    expect(refusedAt(S.CreateSecretRequest, { ...base, allowed_hosts: bad }))
      .toEqual(bad.map((_, i) => `allowed_hosts.${i}`))
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
