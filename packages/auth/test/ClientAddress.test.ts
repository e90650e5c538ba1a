/** The pure parts of the abuse limits: client addresses, rate keys, the backoff and audit schedule. */
import { describe, expect, it } from "@effect/vitest"
import { audited, blockFor, FREE_FAILURES, MAX_BLOCK_MS } from "../src/Auth/SignInThrottle.ts"
import {
  clientAddress,
  NO_PROXIES,
  normalizeAddress,
  parseTrustedProxies,
  rateKey,
  trustedProxies
} from "../src/ClientAddress.ts"
import { waitFor } from "../src/RateLimit.ts"

const proxies = (text: string) => {
  const parsed = parseTrustedProxies(text)
  if (!parsed.ok) throw new Error(parsed.message)
  return trustedProxies(parsed.entries)
}

describe("client address", () => {
  it("normalises what sockets and proxies write", () => {
    expect(normalizeAddress("::ffff:127.0.0.1")).toBe("127.0.0.1")
    expect(normalizeAddress("[2001:DB8::1]:443")).toBe("2001:db8::1")
    expect(normalizeAddress(" 203.0.113.9:5678 ")).toBe("203.0.113.9")
    expect(normalizeAddress("fe80::1%eth0")).toBe("fe80::1")
    for (const bad of ["", "unknown", "1.2.3", "1.2.3.4.5", "<script>", "[::1"]) {
      expect(normalizeAddress(bad)).toBeUndefined()
    }
  })

  it("is the peer unless the peer is a trusted proxy; X-Forwarded-For is read from the right", () => {
    // No proxies configured: the header is anyone's to write, so it is ignored.
    expect(clientAddress("198.51.100.7", "203.0.113.1", NO_PROXIES)).toBe("198.51.100.7")
    const trusted = proxies("10.0.0.0/8, ::1")
    expect(clientAddress("198.51.100.7", "203.0.113.1", trusted)).toBe("198.51.100.7")
    expect(clientAddress("10.1.2.3", "203.0.113.1", trusted)).toBe("203.0.113.1")
    // The client prepended a fake; the proxies appended what they saw.
    expect(clientAddress("10.1.2.3", "1.1.1.1, 203.0.113.1, 10.9.9.9", trusted)).toBe("203.0.113.1")
    expect(clientAddress("::1", "2001:db8::5", trusted)).toBe("2001:db8::5")
    // Garbage where a trusted proxy would have written an address: the last trusted hop.
    expect(clientAddress("10.1.2.3", "evil, junk", trusted)).toBe("10.1.2.3")
    // Only trusted hops: the left-most of them.
    expect(clientAddress("10.1.2.3", "10.0.0.9", trusted)).toBe("10.0.0.9")
    expect(clientAddress("::ffff:10.1.2.3", undefined, trusted)).toBe("10.1.2.3")
    expect(clientAddress(undefined, "203.0.113.1", trusted)).toBeUndefined()
  })

  it("SVC_TRUSTED_PROXIES refuses entries that are not addresses or CIDRs", () => {
    expect(parseTrustedProxies("")).toEqual({ ok: true, entries: [] })
    expect(parseTrustedProxies(" 127.0.0.1 , fd00::/8,192.168.0.0/16 ").ok).toBe(true)
    for (const bad of ["localhost", "10.0.0.0/33", "::/129", "10.0.0.0/8/1", "10.0.0.0/x"]) {
      expect(parseTrustedProxies(bad).ok).toBe(false)
    }
  })

  it("rate keys: IPv4 per address, IPv6 per /64", () => {
    expect(rateKey("203.0.113.9")).toBe("203.0.113.9")
    expect(rateKey("2001:db8:1:2:aaaa::1")).toBe("2001:db8:1:2::/64")
    expect(rateKey("2001:db8:1:2:bbbb:cccc:dddd:eeee")).toBe("2001:db8:1:2::/64")
    expect(rateKey("2001:db8::1")).toBe("2001:db8:0:0::/64")
    expect(rateKey("::1")).toBe("0:0:0:0::/64")
    expect(rateKey(undefined)).toBe("unknown")
  })
})

describe("sign-in backoff and its audit rows", () => {
  it("the first failures are free, then 1 s doubling up to 15 minutes", () => {
    expect([1, 2, 3, 4].map(blockFor)).toEqual([0, 0, 0, 0])
    expect(blockFor(FREE_FAILURES)).toBe(1000)
    expect(blockFor(FREE_FAILURES + 3)).toBe(8000)
    expect(blockFor(FREE_FAILURES + 20)).toBe(MAX_BLOCK_MS)
    expect(blockFor(1_000_000)).toBe(MAX_BLOCK_MS)
  })

  it("audits failures 1 to 5, then 10, 20, 40...: logarithmically many", () => {
    const rows = Array.from({ length: 10_000 }, (_, i) => i + 1).filter(audited)
    expect(rows.slice(0, 9)).toEqual([1, 2, 3, 4, 5, 10, 20, 40, 80])
    expect(rows.length).toBe(5 + 10)
  })
})

describe("token bucket", () => {
  it("waitFor says how long until a token, and takes nothing", () => {
    const config = { perSecond: 0.5, burst: 1 }
    expect(waitFor(undefined, 0, config)).toBeUndefined()
    expect(waitFor({ tokens: 0, updatedMs: 0 }, 0, config)).toBe(2)
    expect(waitFor({ tokens: 0, updatedMs: 0 }, 1000, config)).toBe(1)
    expect(waitFor({ tokens: 0, updatedMs: 0 }, 2000, config)).toBeUndefined()
  })
})
