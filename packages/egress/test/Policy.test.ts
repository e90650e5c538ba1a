import { describe, expect, it } from "@effect/vitest"
import { OPEN_POLICY } from "@svc/domain/Network"
import { Duplex } from "node:stream"
import * as Tls from "node:tls"
import { answerFromHosts, parseQuery } from "../src/Dns.ts"
import { parseHosts } from "../src/HostsFile.ts"
import { addressRules, decide } from "../src/Policy.ts"
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
      expect(decide(rules, OPEN_POLICY, "allow", undefined, address)._tag).toBe("Deny")
    }
    expect(decide(rules, OPEN_POLICY, "allow", undefined, "198.51.100.7")._tag).toBe("Allow")
    expect(decide(rules, OPEN_POLICY, "allow", undefined, "10.1.2.3")._tag).toBe("Allow")
    // The sandboxes' subnet lies inside an allowed 10/8, and stays refused.
    expect(decide(rules, OPEN_POLICY, "allow", undefined, "10.213.0.1")).toMatchObject({
      _tag: "Deny",
      reason: "10.213.0.1 is an address of the platform"
    })
    expect(decide(rules, OPEN_POLICY, "allow", undefined, "2606:4700::1111")._tag).toBe("Allow")
  })

  it("deny wins, domains match names, CIDRs match addresses, an allow list is exclusive, the default applies to an empty one", () => {
    const policy = { allow_out: ["*.example.com", "1.1.1.0/24"], deny_out: ["bad.example.com", "1.1.1.1"] }
    expect(decide(rules, policy, "allow", "api.example.com", "93.184.216.34")._tag).toBe("Allow")
    expect(decide(rules, policy, "allow", "bad.example.com", "93.184.216.34")).toMatchObject({
      reason: `deny_out rule "bad.example.com"`
    })
    expect(decide(rules, policy, "allow", "example.com", "93.184.216.34")).toMatchObject({
      reason: "no allow_out rule matches"
    })
    expect(decide(rules, policy, "allow", undefined, "1.1.1.2")._tag).toBe("Allow")
    expect(decide(rules, policy, "allow", "api.example.com", "1.1.1.1")._tag).toBe("Deny")
    expect(decide(rules, OPEN_POLICY, "deny", "example.com", "93.184.216.34")._tag).toBe("Deny")
    expect(decide(rules, OPEN_POLICY, "allow", "example.com", "93.184.216.34")._tag).toBe("Allow")
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
  })
})
