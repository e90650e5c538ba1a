import { domainMatches, NetworkPolicy, parseRule, Rule } from "@svc/domain/Network"
import { Result, Schema } from "effect"
import { describe, expect, it } from "vitest"

const decodeRule = Schema.decodeUnknownResult(Rule)
const decodePolicy = Schema.decodeUnknownResult(NetworkPolicy)

describe("egress rules", () => {
  it("takes CIDRs, addresses and domains, lowercased and trimmed", () => {
    expect(parseRule("203.0.113.0/24")).toEqual(
      Result.succeed({ _tag: "Cidr", family: 4, address: "203.0.113.0", prefix: 24 })
    )
    expect(parseRule("2001:DB8::/32")).toEqual(
      Result.succeed({ _tag: "Cidr", family: 6, address: "2001:db8::", prefix: 32 })
    )
    expect(parseRule("198.51.100.7")).toEqual(
      Result.succeed({ _tag: "Cidr", family: 4, address: "198.51.100.7", prefix: 32 })
    )
    expect(parseRule(" *.Example.COM ")).toEqual(
      Result.succeed({ _tag: "Domain", name: "example.com", wildcard: true })
    )
    expect(decodeRule(" Example.com ")).toEqual(Result.succeed("example.com"))
  })

  it("refuses what is neither, with a message naming the rule", () => {
    for (
      const bad of [
        "",
        "10.0.0.0/33",
        "::/129",
        "10.0.0.0/x",
        "fe80::1%eth0",
        "localhost",
        "a..b",
        "-a.com",
        "ex*.com",
        "*.",
        "a.com/8",
        "http://a.com",
        "a_b.com"
      ]
    ) {
      const result = parseRule(bad)
      expect(Result.isFailure(result), bad).toBe(true)
    }
    const decoded = decodeRule("localhost")
    expect(Result.isFailure(decoded)).toBe(true)
    expect(String(Result.isFailure(decoded) ? decoded.failure : "")).toContain("two labels")
  })

  it("caps a policy at 100 rules per list", () => {
    const rules = Array.from({ length: 101 }, (_, i) => `h${i}.example.com`)
    expect(Result.isFailure(decodePolicy({ allow_out: rules, deny_out: [] }))).toBe(true)
    expect(Result.isSuccess(decodePolicy({ allow_out: rules.slice(1), deny_out: [] }))).toBe(true)
  })

  it("matches a wildcard on subdomains only, an exact name on itself only", () => {
    expect(domainMatches("*.example.com", "api.example.com")).toBe(true)
    expect(domainMatches("*.example.com", "a.b.example.com.")).toBe(true)
    expect(domainMatches("*.example.com", "example.com")).toBe(false)
    expect(domainMatches("*.example.com", "badexample.com")).toBe(false)
    expect(domainMatches("example.com", "EXAMPLE.com")).toBe(true)
    expect(domainMatches("example.com", "api.example.com")).toBe(false)
  })
})
