import { describe, expect, it } from "@effect/vitest"
import { type NetworkPolicy, OPEN_POLICY } from "@svc/domain/Network"
import { Duplex } from "node:stream"
import * as Tls from "node:tls"
import { answerAddresses, answerFromHosts, parseQuery, ResolvedNames } from "../src/Dns.ts"
import { parseHosts } from "../src/HostsFile.ts"
import { conflict, type OwnerRecord } from "../src/Owner.ts"
import { addressRules, byAddress, checkPolicy, decide, type Destination } from "../src/Policy.ts"
import { parseClientHello, parseHostHeader, parseProxyHeader } from "../src/Sniff.ts"

const rules = addressRules(
  [{ address: "198.51.100.0", prefix: 24, family: "ipv4" }, { address: "10.0.0.0", prefix: 8, family: "ipv4" }],
  [{ address: "10.213.0.0", prefix: 16, family: "ipv4" }, { address: "192.0.2.9", prefix: 32, family: "ipv4" }]
)

describe("decide", () => {
  it("refuses non-public addresses, IPv4 and IPv6, unless the operator allowed them; never the platform's", () => {
    for (
      const address of [
        "127.0.0.1",
        "169.254.169.254",
        "192.168.1.1",
        "::1",
        "fe80::1",
        "fd00:ec2::254",
        "::ffff:10.0.0.1"
      ]
    ) {
      expect(decide(rules, OPEN_POLICY, "allow", byAddress(undefined, address))._tag).toBe("Deny")
    }
    expect(decide(rules, OPEN_POLICY, "allow", byAddress(undefined, "198.51.100.7"))._tag).toBe("Allow")
    expect(decide(rules, OPEN_POLICY, "allow", byAddress(undefined, "10.1.2.3"))._tag).toBe("Allow")
    // The sandboxes' subnet lies inside an allowed 10/8, and stays refused.
    expect(decide(rules, OPEN_POLICY, "allow", byAddress(undefined, "10.213.0.1"))).toMatchObject({
      _tag: "Deny",
      reason: "10.213.0.1 is an address of the platform"
    })
    expect(decide(rules, OPEN_POLICY, "allow", byAddress(undefined, "2606:4700::1111"))._tag).toBe("Allow")
  })

  it("deny wins, domains match names, CIDRs match addresses, an allow list is exclusive, the default applies to an empty one", () => {
    const policy = { allow_out: ["*.example.com", "1.1.1.0/24"], deny_out: ["bad.example.com", "1.1.1.1"] }
    expect(decide(rules, policy, "allow", byAddress("api.example.com", "93.184.216.34"))._tag).toBe("Allow")
    expect(decide(rules, policy, "allow", byAddress("bad.example.com", "93.184.216.34"))).toMatchObject({
      reason: `deny_out rule "bad.example.com"`
    })
    expect(decide(rules, policy, "allow", byAddress("example.com", "93.184.216.34"))).toMatchObject({
      reason: "no allow_out rule matches"
    })
    expect(decide(rules, policy, "allow", byAddress(undefined, "1.1.1.2"))._tag).toBe("Allow")
    expect(decide(rules, policy, "allow", byAddress("api.example.com", "1.1.1.1"))._tag).toBe("Deny")
    expect(decide(rules, OPEN_POLICY, "deny", byAddress("example.com", "93.184.216.34"))._tag).toBe("Deny")
    expect(decide(rules, OPEN_POLICY, "allow", byAddress("example.com", "93.184.216.34"))._tag).toBe("Allow")
  })
})

describe("domain rules against connections without a name (issue 25, item 16)", () => {
  // The platform's resolver answered evil.example with 203.0.113.66, cdn.example with .67.
  const resolved = new ResolvedNames()
  resolved.record("evil.example", ["203.0.113.66"])
  resolved.record("cdn.example", ["203.0.113.67"])
  const at = (name: string | undefined, address: string, named = name !== undefined): Destination => ({
    name,
    address,
    named,
    namesOf: (a) => resolved.namesOf(a)
  })
  const denyEvil: NetworkPolicy = { allow_out: [], deny_out: ["evil.example"] }
  const denyWild: NetworkPolicy = { allow_out: [], deny_out: ["*.evil.example"] }
  const allowCidr: NetworkPolicy = { allow_out: ["*.good.example", "203.0.113.0/26"], deny_out: ["evil.example"] }
  // [what the attacker does, policy, destination, verdict or reason fragment]
  const table: ReadonlyArray<readonly [string, NetworkPolicy, Destination, string]> = [
    ["Host: the denied name", denyEvil, at("evil.example", "203.0.113.66"), `deny_out rule "evil.example"`],
    [
      "IP literal of the denied name (Host: 203.0.113.66)",
      denyEvil,
      at(undefined, "203.0.113.66", true),
      `deny_out rule "evil.example" (203.0.113.66 is an address of evil.example)`
    ],
    ["IP literal of another name", denyEvil, at(undefined, "203.0.113.67", true), "Allow"],
    ["another name on the denied name's address", denyEvil, at("cdn.example", "203.0.113.66"), "Allow"],
    [
      "HTTP/1.0 without Host, TLS without SNI, raw TCP",
      denyEvil,
      at(undefined, "203.0.113.67", false),
      "names no host"
    ],
    ["no name, a wildcard deny rule", denyWild, at(undefined, "203.0.113.99", false), "names no host"],
    ["no name, no domain rules at all", OPEN_POLICY, at(undefined, "203.0.113.66", false), "Allow"],
    ["no name, an allow_out CIDR covers it", allowCidr, at(undefined, "203.0.113.1", false), "Allow"],
    ["no name, outside the allow_out CIDR", allowCidr, at(undefined, "203.0.113.99", false), "names no host"],
    [
      "no name, inside the CIDR but the denied name's address",
      allowCidr,
      at(undefined, "203.0.113.66", false),
      "is an address of evil.example"
    ]
  ]
  it.each(table)("%s", (_attack, policy, destination, expected) => {
    const verdict = checkPolicy(policy, "allow", destination)
    if (expected === "Allow") expect(verdict).toEqual({ _tag: "Allow" })
    else expect(verdict._tag === "Deny" ? verdict.reason : "Allow").toContain(expected)
  })

  it("remembers answers per address, bounded and for a while", () => {
    const memory = new ResolvedNames()
    memory.record("a.example", ["192.0.2.1", "2001:db8::1"], 0)
    memory.record("b.example", ["192.0.2.1"], 0)
    expect(memory.namesOf("192.0.2.1", 1)).toEqual(["a.example", "b.example"])
    expect(memory.namesOf("2001:db8::1", 1)).toEqual(["a.example"])
    expect(memory.namesOf("192.0.2.1", 2 * 60 * 60 * 1000)).toEqual([])
  })
})

describe("sniffing", () => {
  it("reads the PROXY line, Host headers and a real ClientHello's server name", async () => {
    expect(parseProxyHeader(Buffer.from("PROXY TCP4 10.0.0.2 1.2.3.4 5000 443\r\nabc"))).toMatchObject({
      source: "10.0.0.2",
      destination: "1.2.3.4",
      destinationPort: 443,
      rest: Buffer.from("abc")
    })
    expect(parseProxyHeader(Buffer.from("PROXY TCP4 10.0.0.2"))).toBeUndefined()
    expect(parseProxyHeader(Buffer.from("GET / HTTP/1.1\r\n"))).toBeInstanceOf(Error)
    expect(parseHostHeader("API.Example.com:8080")).toEqual({ host: "api.example.com", literal: false })
    expect(parseHostHeader("[::1]:80")).toEqual({ host: "::1", literal: true })
    expect(parseHostHeader("bad host")).toBeUndefined()
    // A ClientHello as Node's TLS client sends it.
    const hello = await new Promise<Buffer>((resolve) => {
      const wire = new Duplex({
        read() {},
        write(chunk, _e, done) {
          resolve(Buffer.from(chunk))
          done()
        }
      })
      Tls.connect({ socket: wire, servername: "api.example.com" }).on("error", () => undefined)
    })
    expect(parseClientHello(hello)).toEqual({ _tag: "Hello", serverName: "api.example.com" })
    expect(parseClientHello(hello.subarray(0, 20))).toEqual({ _tag: "Incomplete" })
    expect(parseClientHello(Buffer.from("GET /"))).toEqual({ _tag: "NotTls" })
  })
})

describe("hosts file and DNS answers", () => {
  it("answers A and AAAA from the file, nothing for other names", () => {
    const hosts = parseHosts("# comment\n198.51.100.10 Fake.Test other.test\n2001:db8::5 fake.test\nnot-an-ip x.test\n")
    const query = (name: string, type: number) => {
      const labels = name.split(".").flatMap((l) => [Buffer.from([l.length]), Buffer.from(l)])
      const tail = Buffer.alloc(4)
      tail.writeUInt16BE(type, 0)
      tail.writeUInt16BE(1, 2)
      return Buffer.concat([
        Buffer.from([0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]),
        ...labels,
        Buffer.from([0]),
        tail
      ])
    }
    expect(parseQuery(query("fake.test", 1))?.name).toBe("fake.test")
    const a = answerFromHosts(query("fake.test", 1), hosts)!
    expect(a.readUInt16BE(0)).toBe(0x1234)
    expect(a.readUInt16BE(6)).toBe(1)
    expect([...a.subarray(a.length - 4)]).toEqual([198, 51, 100, 10])
    const aaaa = answerFromHosts(query("fake.test", 28), hosts)!
    expect(aaaa.subarray(aaaa.length - 16).toString("hex")).toBe("20010db8000000000000000000000005")
    expect(answerFromHosts(query("x.test", 1), hosts)).toBeUndefined()
    // What the resolver remembers of an answer: the question's name and every address.
    expect(answerAddresses(a)).toEqual({ name: "fake.test", addresses: ["198.51.100.10"] })
    expect(answerAddresses(aaaa)).toEqual({ name: "fake.test", addresses: ["2001:db8::5"] })
    expect(answerAddresses(query("fake.test", 1))).toBeUndefined()
  })
})

describe("who may serve a bridge (issue 25, item 2)", () => {
  const mine: OwnerRecord = {
    platform: "egress@2026-11-27T20:00:00Z",
    describe: "NATS 127.0.0.1:4222, bucket egress",
    bridge: "svcbr0",
    subnet: "10.213.0.0/16",
    tcpPort: 15001,
    dnsPort: 15053,
    hostId: "host-a",
    pid: 10,
    started: "1"
  }
  const table: ReadonlyArray<readonly [string, Partial<OwnerRecord>, string | undefined]> = [
    ["an agent of the same platform on the bridge", { hostId: "host-b", pid: 11 }, undefined],
    ["another platform on the bridge", { platform: "other_egress@2026-11-27T21:00:00Z" }, "another platform"],
    ["the same platform, another subnet on the bridge", { subnet: "10.214.0.0/16" }, "the agents of a bridge"],
    ["another bridge with the same subnet", { bridge: "svcbr1", platform: "x@1" }, "the subnet 10.213.0.0/16"],
    [
      "another bridge with the same port",
      { bridge: "svcbr1", platform: "x@1", subnet: "10.99.0.0/16", dnsPort: 16053 },
      "egress ports"
    ],
    ["another bridge, its own subnet and ports", {
      bridge: "svcbr1",
      platform: "x@1",
      subnet: "10.99.0.0/16",
      tcpPort: 16001,
      dnsPort: 16053
    }, undefined]
  ]
  it.each(table)("%s", (_case, other, expected) => {
    const why = conflict(mine, { ...mine, ...other })
    if (expected === undefined) expect(why).toBeUndefined()
    else expect(why).toContain(expected)
  })
})
