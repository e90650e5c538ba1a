import { assert, describe, expect, it } from "@effect/vitest"
import { MAX_WEBHOOK_URL_LENGTH } from "@svc/domain/Webhook"
import { AllowedSubnets } from "@svc/webhooks/Config"
import {
  classifyAddress,
  type ResolvedAddress,
  WebhookAddressGuard,
  WebhookResolveError,
  WebhookResolver,
  WebhookUrlRefused
} from "@svc/webhooks/Subscriptions/AddressGuard"
import { parseAllowedSubnets } from "@svc/webhooks/Subscriptions/Subnets"
import { ConfigProvider, Effect, Exit, Layer, Result } from "effect"
import { TestClock } from "effect/testing"

/** A resolver answering from a table; unknown names fail like NXDOMAIN. Counts lookups. */
const tableResolver = (table: Record<string, ReadonlyArray<string>>, calls: Array<string> = []) =>
  Layer.succeed(WebhookResolver)(WebhookResolver.of({
    lookup: (hostname) =>
      Effect.suspend(() => {
        calls.push(hostname)
        const addresses = table[hostname]
        return addresses === undefined
          ? Effect.fail(new WebhookResolveError({ hostname, message: "lookup failed (ENOTFOUND)" }))
          : Effect.succeed(
            addresses.map((address): ResolvedAddress => ({ address, family: address.includes(":") ? 6 : 4 }))
          )
      })
  }))

const names: Record<string, ReadonlyArray<string>> = {
  "public.example": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
  "internal.example": ["10.0.0.5"],
  "loopback.example": ["127.0.0.1"],
  "mixed.example": ["93.184.215.14", "192.168.1.1"],
  "metadata.example": ["169.254.169.254"],
  "v6-loop.example": ["::1"],
  "empty.example": []
}

const guardLayer = (allowedSubnets: string) =>
  WebhookAddressGuard.layerWith({ allowedSubnets: Result.getOrThrow(parseAllowedSubnets(allowedSubnets)) }).pipe(
    Layer.provide(tableResolver(names))
  )

const refusal = (url: string) => WebhookAddressGuard.use((guard) => guard.checkUrl(url)).pipe(Effect.flip)

describe("classifyAddress", () => {
  const nonPublic: ReadonlyArray<readonly [string, string]> = [
    ["0.0.0.0", "unspecified"],
    ["0.1.2.3", "unspecified"],
    ["10.0.0.1", "private"],
    ["10.255.255.255", "private"],
    ["100.64.0.1", "shared address space (CGNAT)"],
    ["100.127.255.254", "shared address space (CGNAT)"],
    ["127.0.0.1", "loopback"],
    ["127.255.255.254", "loopback"],
    ["169.254.169.254", "link-local"],
    ["172.16.0.1", "private"],
    ["172.31.255.255", "private"],
    ["192.0.0.8", "IETF protocol assignments"],
    ["192.0.2.1", "documentation"],
    ["192.88.99.1", "6to4 relay anycast"],
    ["192.168.0.1", "private"],
    ["198.18.0.1", "benchmarking"],
    ["198.19.255.255", "benchmarking"],
    ["198.51.100.7", "documentation"],
    ["203.0.113.9", "documentation"],
    ["224.0.0.1", "multicast"],
    ["239.255.255.250", "multicast"],
    ["240.0.0.1", "reserved"],
    ["255.255.255.255", "broadcast"],
    ["::", "unspecified"],
    ["::1", "loopback"],
    ["::ffff:127.0.0.1", "IPv4-mapped"],
    ["::ffff:1.1.1.1", "IPv4-mapped"],
    ["::127.0.0.1", "IPv4-compatible"],
    ["64:ff9b::7f00:1", "IPv4/IPv6 translation (NAT64)"],
    ["64:ff9b:1::1", "IPv4/IPv6 translation (NAT64)"],
    ["100::1", "discard-only"],
    ["2001::1", "Teredo"],
    ["2001:2::1", "benchmarking"],
    ["2001:10::1", "ORCHID"],
    ["2001:20::1", "ORCHIDv2"],
    ["2001:db8::1", "documentation"],
    ["2002:7f00:1::1", "6to4"],
    ["3fff::1", "documentation"],
    ["fc00::1", "unique local"],
    ["fd12:3456::1", "unique local"],
    ["fec0::1", "site-local"],
    ["fe80::1", "link-local"],
    ["ff02::1", "multicast"],
    ["4000::1", "not global unicast"],
    ["fe80::1%eth0", "not an IP address"],
    ["not-an-ip", "not an IP address"]
  ]
  it.each(nonPublic)("%s is non-public (%s)", (address, range) => {
    expect(classifyAddress(address)).toEqual({ _tag: "NonPublic", range })
  })

  it.each([
    "1.1.1.1",
    "8.8.8.8",
    "93.184.215.14",
    "100.63.255.255",
    "100.128.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "192.167.255.255",
    "198.17.255.255",
    "198.20.0.0",
    "223.255.255.255",
    "2606:4700::1111",
    "2a00:1450:4001::200e",
    "2001:4860:4860::8888"
  ])("%s is public", (address) => {
    expect(classifyAddress(address)).toEqual({ _tag: "Public" })
  })
})

describe("parseAllowedSubnets", () => {
  it("parses IPv4 and IPv6 CIDRs, bare addresses and blanks", () => {
    expect(parseAllowedSubnets(" 127.0.0.0/8, fd00::/8 ,,192.0.2.7")).toEqual(Result.succeed([
      { address: "127.0.0.0", prefix: 8, family: "ipv4" },
      { address: "fd00::", prefix: 8, family: "ipv6" },
      { address: "192.0.2.7", prefix: 32, family: "ipv4" }
    ]))
    expect(parseAllowedSubnets("")).toEqual(Result.succeed([]))
  })
  it.each([
    "10.0.0.0/33",
    "fd00::/129",
    "10.0.0.0/",
    "10.0.0.0/-1",
    "10.0.0.0/8x",
    "10.0.0/8",
    "localhost",
    "10.0.0.0/0x8",
    "fe80::1%eth0/64",
    "1.2.3.4/8/9"
  ])("refuses %s", (entry) => {
    const result = parseAllowedSubnets(`127.0.0.0/8,${entry}`)
    assert.isTrue(Result.isFailure(result))
    if (Result.isFailure(result)) expect(result.failure).toContain(`"${entry}"`)
  })

  it.effect("the Config reads SVC_WEBHOOK_ALLOWED_SUBNETS, defaults to none, and fails on a bad entry", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) => AllowedSubnets.parse(ConfigProvider.fromEnv({ env }))
      expect(yield* read({})).toEqual([])
      expect(yield* read({ SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8" })).toEqual([
        { address: "127.0.0.0", prefix: 8, family: "ipv4" }
      ])
      const error = yield* Effect.flip(read({ SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8,10.0.0.0/99" }))
      expect(error._tag).toBe("ConfigError")
      expect(error.message).toContain("10.0.0.0/99")
    }))

  it.effect("a bad SVC_WEBHOOK_ALLOWED_SUBNETS fails the guard layer", () =>
    Effect.gen(function*() {
      const exit = yield* WebhookAddressGuard.use(() => Effect.void).pipe(
        Effect.provide(WebhookAddressGuard.layerConfig.pipe(Layer.provide(tableResolver(names)))),
        Effect.provideService(
          ConfigProvider.ConfigProvider,
          ConfigProvider.fromEnv({ env: { SVC_WEBHOOK_ALLOWED_SUBNETS: "bogus" } })
        ),
        Effect.exit
      )
      assert.isTrue(Exit.isFailure(exit))
      expect(String(exit)).toContain("bogus")
    }))
})

describe("WebhookAddressGuard.checkUrl (no allowed subnets)", () => {
  const spellings = [
    "http://127.0.0.1/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://0x7f.0.0.1/",
    "http://0x7f000001/",
    "http://017700000001/",
    "http://127.1/",
    "http://127.0.0.1:8080/hook",
    "http://%31%32%37.0.0.1/",
    "http://127。0。0。1/",
    "http://0/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[fe80::1]/",
    "http://[fd00::1]/",
    "http://[ff02::1]/",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.1.2.3/",
    "http://172.20.0.1/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://198.18.0.1/",
    "HTTPS://10.0.0.1/",
    "http://localhost/",
    "http://LOCALHOST:3000/",
    "http://localhost./",
    "http://api.localhost/",
    "http://%6c%6f%63%61%6c%68%6f%73%74/",
    "http://ⓛocalhost/",
    "http://internal.example/",
    "http://loopback.example/",
    "http://metadata.example/",
    "http://v6-loop.example/",
    "http://mixed.example/"
  ]
  it.layer(guardLayer(""))((it) => {
    it.effect.each(spellings)("refuses %s as non-public", (url) =>
      Effect.gen(function*() {
        const error = yield* refusal(url)
        expect(error).toBeInstanceOf(WebhookUrlRefused)
        expect(error.reason).toBe("non_public_address")
      }))

    it.effect("does not name the address a host name resolved to", () =>
      Effect.gen(function*() {
        const error = yield* refusal("http://internal.example/")
        expect(error.message).not.toContain("10.0.0.5")
        expect(error.message).toContain("private")
      }))

    it.effect.each(
      [
        ["ftp://1.1.1.1/", "unsupported_scheme"],
        ["file:///etc/passwd", "unsupported_scheme"],
        ["javascript:alert(1)", "unsupported_scheme"],
        ["data:text/plain,hi", "unsupported_scheme"],
        ["ws://1.1.1.1/", "unsupported_scheme"],
        ["gopher://1.1.1.1/", "unsupported_scheme"],
        ["", "malformed"],
        ["not a url", "malformed"],
        ["/relative/path", "malformed"],
        ["http://", "malformed"],
        ["http://a b/", "malformed"],
        ["http://1.2.3.4.5/", "malformed"],
        ["http://256.1.1.1/", "malformed"],
        ["http://[fe80::1%25eth0]/", "malformed"],
        ["http://1.1.1.1:65536/", "malformed"],
        ["http://1.1.1.1:0/", "invalid_port"],
        ["http://user:pass@1.1.1.1/", "credentials_in_url"],
        ["http://user@1.1.1.1/", "credentials_in_url"],
        ["http://:pass@1.1.1.1/", "credentials_in_url"],
        [`https://1.1.1.1/${"a".repeat(MAX_WEBHOOK_URL_LENGTH)}`, "too_long"],
        ["http://nowhere.example/", "unresolvable"],
        ["http://empty.example/", "unresolvable"]
      ] as const
    )("refuses %s (%s)", ([url, reason]) =>
      Effect.gen(function*() {
        expect((yield* refusal(url)).reason).toBe(reason)
      }))

    it.effect.each(
      [
        ["https://1.1.1.1/hook", ["1.1.1.1"], "https://1.1.1.1/hook"],
        ["http://8.8.8.8:8080/a?b=c", ["8.8.8.8"], "http://8.8.8.8:8080/a?b=c"],
        ["https://[2606:4700::1111]/", ["2606:4700::1111"], "https://[2606:4700::1111]/"],
        [
          "HTTPS://PUBLIC.EXAMPLE/Hook",
          ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
          "https://public.example/Hook"
        ],
        ["http://16843009/", ["1.1.1.1"], "http://1.1.1.1/"]
      ] as const
    )("accepts %s", ([url, addresses, normalised]) =>
      Effect.gen(function*() {
        const checked = yield* WebhookAddressGuard.use((guard) => guard.checkUrl(url))
        expect(checked).toEqual({ url: normalised, addresses })
      }))

    it.effect("connectTarget returns the checked address, host name, port and path", () =>
      Effect.gen(function*() {
        const target = yield* WebhookAddressGuard.use((guard) =>
          guard.connectTarget("https://Public.Example:8443/in?x=1#frag")
        )
        expect(target).toEqual({
          url: "https://public.example:8443/in?x=1#frag",
          protocol: "https:",
          hostname: "public.example",
          port: 8443,
          path: "/in?x=1",
          address: "93.184.215.14",
          family: 4,
          addresses: [
            { address: "93.184.215.14", family: 4 },
            { address: "2606:2800:21f:cb07:6820:80da:af6b:8b2c", family: 6 }
          ]
        })
        const v6 = yield* WebhookAddressGuard.use((guard) => guard.connectTarget("http://[2606:4700::1111]/"))
        expect([v6.hostname, v6.address, v6.family, v6.port]).toEqual(["2606:4700::1111", "2606:4700::1111", 6, 80])
        expect(
          (yield* Effect.flip(WebhookAddressGuard.use((guard) => guard.connectTarget("http://mixed.example/")))).reason
        )
          .toBe("non_public_address")
      }))
  })
})

describe("connectTarget's short cache", () => {
  it.effect("reuses a checked answer for targetCacheMs, never an unchecked one; checkUrl always resolves afresh", () =>
    Effect.gen(function*() {
      // A name that answers public, then (rebinding) private.
      const table: Record<string, ReadonlyArray<string>> = { "rebind.example": ["93.184.215.14"] }
      const calls: Array<string> = []
      const guard = yield* WebhookAddressGuard.make({ allowedSubnets: [], targetCacheMs: 200 }).pipe(
        Effect.provide(tableResolver(table, calls))
      )
      const first = yield* guard.connectTarget("http://rebind.example/in")
      table["rebind.example"] = ["10.0.0.5"]
      // Within the period: the answer checked before, no second lookup.
      const again = yield* guard.connectTarget("http://rebind.example/in")
      expect([first.address, again.address, calls.length]).toEqual(["93.184.215.14", "93.184.215.14", 1])
      // Create and update always ask DNS and check what it says now.
      expect((yield* Effect.flip(guard.checkUrl("http://rebind.example/in"))).reason).toBe("non_public_address")
      expect(calls.length).toBe(2)
      // After it: resolved and checked again, and refused.
      yield* TestClock.adjust("250 millis")
      expect((yield* Effect.flip(guard.connectTarget("http://rebind.example/in"))).reason).toBe("non_public_address")
      // A refusal is not kept: once the name is public again, the next attempt may connect.
      table["rebind.example"] = ["93.184.215.15"]
      expect((yield* guard.connectTarget("http://rebind.example/in")).address).toBe("93.184.215.15")
      expect(calls.length).toBe(4)
      // Without a cache, every attempt resolves.
      const uncached = yield* WebhookAddressGuard.make({ allowedSubnets: [], targetCacheMs: 0 }).pipe(
        Effect.provide(tableResolver(table, calls))
      )
      yield* uncached.connectTarget("http://rebind.example/in")
      yield* uncached.connectTarget("http://rebind.example/in")
      expect(calls.length).toBe(6)
    }))
})

describe("WebhookAddressGuard with SVC_WEBHOOK_ALLOWED_SUBNETS=127.0.0.0/8", () => {
  it.layer(guardLayer("127.0.0.0/8"))((it) => {
    it.effect.each(["http://127.0.0.1:9/", "http://127.1/", "http://2130706433/", "http://loopback.example/"])(
      "accepts %s",
      (url) =>
        Effect.gen(function*() {
          const checked = yield* WebhookAddressGuard.use((guard) => guard.checkUrl(url))
          expect(checked.addresses).toEqual(["127.0.0.1"])
        })
    )
    it.effect.each([
      "http://10.0.0.1/",
      "http://internal.example/",
      "http://169.254.169.254/",
      "http://[::1]/",
      "http://[::ffff:127.0.0.1]/",
      "http://localhost/"
    ])("still refuses %s", (url) =>
      Effect.gen(function*() {
        expect((yield* refusal(url)).reason).toBe("non_public_address")
      }))
  })
})

describe("WebhookResolver.layer (system resolver)", () => {
  it.effect("resolves localhost from /etc/hosts to loopback only", () =>
    Effect.gen(function*() {
      const addresses = yield* WebhookResolver.use((resolver) => resolver.lookup("localhost"))
      assert.isTrue(addresses.length > 0)
      for (const { address } of addresses) {
        expect(classifyAddress(address)).toMatchObject({ _tag: "NonPublic", range: "loopback" })
      }
    }).pipe(Effect.provide(WebhookResolver.layer)))

  it.effect("a name that cannot resolve is unresolvable", () =>
    Effect.gen(function*() {
      const error = yield* refusal("https://no-such-host.invalid/")
      expect(error.reason).toBe("unresolvable")
    }).pipe(Effect.provide(WebhookAddressGuard.layer)))
})
