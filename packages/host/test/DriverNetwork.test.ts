/** Sandbox networking (`src/Driver/Network.ts`): what a sandbox reaches, veth names, leases. */
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as Http from "node:http"
import * as Net from "node:net"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { intToIp, lease, macOf, parseSubnet, release, vethNames } from "../src/Driver/Network.ts"
import { exec, sh, spec, TestDriver, text, uniqueId, withSandbox } from "./fixtures/support.ts"

/** A TCP server on the host that records whether anyone connected. */
const hostServer = (host: string) =>
  Effect.acquireRelease(
    Effect.callback<{ port: number; connections: () => number; close: () => void }>((resume) => {
      let connections = 0
      const server = Net.createServer((socket) => {
        connections++
        socket.end("host-secret\n")
      })
      server.listen(0, host, () => {
        const address = server.address() as Net.AddressInfo
        resume(Effect.succeed({ port: address.port, connections: () => connections, close: () => server.close() }))
      })
    }),
    (server) => Effect.sync(() => server.close())
  )

const httpGet = (url: string) =>
  Effect.callback<{ status: number; body: string }, Error>((resume) => {
    const request = Http.get(url, { timeout: 5000 }, (response) => {
      let body = ""
      response.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")))
      response.on("end", () => resume(Effect.succeed({ status: response.statusCode ?? 0, body })))
    })
    request.on("error", (e) => resume(Effect.fail(e)))
    request.on("timeout", () => request.destroy(new Error("timeout")))
  })

layer(TestDriver.layer(), { excludeTestServices: true })("SandboxDriver network (bubblewrap)", (it) => {
  it.effect("network: host loopback and host addresses unreachable, exposed port reachable", () =>
    Effect.gen(function*() {
      const { driver } = yield* TestDriver
      const id = uniqueId("net")
      const info = yield* withSandbox(driver, spec(id, { exposedPorts: [8080] }))

      const loopback = yield* hostServer("127.0.0.1")
      const fromInside = yield* driver.exec(
        id,
        sh(`echo hi | nc -w 2 127.0.0.1 ${loopback.port}`, { timeoutMs: 10_000 })
      )
      assert.notInclude(text(fromInside.stdout), "host-secret")
      assert.strictEqual(loopback.connections(), 0)

      // A host address that is not the bridge's: no route leads there from inside.
      const external = Object.values(Os.networkInterfaces()).flat()
        .find((a) => a !== undefined && a.family === "IPv4" && !a.internal && !a.address.startsWith("10.213."))
      if (external !== undefined) {
        const wide = yield* hostServer("0.0.0.0")
        const toHost = yield* driver.exec(
          id,
          sh(`echo hi | nc -w 2 ${external.address} ${wide.port}`, { timeoutMs: 10_000 })
        )
        assert.notInclude(text(toHost.stdout), "host-secret")
        assert.strictEqual(wide.connections(), 0)
      }

      // Its MAC follows from its address, so a neighbour entry the host kept from an earlier
      // sandbox on this address still leads here.
      const link = yield* driver.exec(id, exec(["ip", "link", "show", "eth0"]))
      assert.include(text(link.stdout), `link/ether ${macOf(info.internalIp)}`)

      const before = yield* driver.stats(id)
      yield* driver.writeFile(id, "/www/big.bin", new Uint8Array(200_000))
      yield* driver.writeFile(id, "/www/hello.txt", new TextEncoder().encode("served from inside\n"))
      const served = yield* driver.exec(id, exec(["httpd", "-p", "8080", "-h", "/www"]))
      assert.strictEqual(served.exitCode, 0, text(served.stderr))
      // httpd binds before it daemonizes: the port is open once exec returns.
      const response = yield* httpGet(`http://${info.internalIp}:8080/hello.txt`)
      assert.strictEqual(response.status, 200)
      assert.strictEqual(response.body, "served from inside\n")

      // What crossed its link is counted on the host side: 200 kB out of the sandbox, a request in.
      const big = yield* httpGet(`http://${info.internalIp}:8080/big.bin`)
      assert.strictEqual(big.status, 200)
      const after = yield* driver.stats(id)
      assert.isAbove(after.netBytesOut! - before.netBytesOut!, 200_000)
      assert.isAbove(after.netBytesIn! - before.netBytesIn!, 100)
      assert.isBelow(after.netBytesIn! - before.netBytesIn!, 100_000)

      // The proxy of exposed ports asks the driver where a port is: an exposed one only.
      const address = yield* driver.portAddress(id, 8080)
      assert.deepStrictEqual(address, { host: info.internalIp, port: 8080 })
      const other = yield* Effect.flip(driver.portAddress(id, 22))
      assert.strictEqual(other._tag, "InvalidSandboxRequest")
      assert.include(other.message, "port 22 is not one of the sandbox's exposed ports")
      const missing = yield* Effect.flip(driver.portAddress(uniqueId("none"), 8080))
      assert.strictEqual(missing._tag, "SandboxNotFound")
    }))
})

describe("SandboxDriver network leases", () => {
  it("derives veth names and the subnet's addresses", () => {
    assert.deepStrictEqual(vethNames("10.213.1.2"), { host: "sv0ad50102" })
    assert.strictEqual(macOf("10.213.1.2"), "02:53:0a:d5:01:02")
    const subnet = parseSubnet("10.213.7.9/16")
    assert.strictEqual(subnet.gateway, "10.213.0.1")
    assert.strictEqual(intToIp(subnet.first), "10.213.0.2")
    assert.strictEqual(intToIp(subnet.last), "10.213.255.254")
  })

  it.live("hands out distinct addresses to concurrent claimants and takes over stale leases", () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.promise(() => Fs.mkdtemp(NodePath.join(Os.tmpdir(), "svc-lease-test-"))),
        (d) => Effect.promise(() => Fs.rm(d, { recursive: true, force: true }))
      )
      const leaseDir = NodePath.join(dir, "leases")
      const subnet = parseSubnet("10.99.0.0/28") // 13 usable addresses
      const owners = Array.from({ length: 13 }, (_, i) => ({ dataDir: dir, sandboxId: `s${i}` }))
      for (const owner of owners) {
        yield* Effect.promise(() => Fs.mkdir(NodePath.join(dir, "sandboxes", owner.sandboxId), { recursive: true }))
      }
      const ips = yield* Effect.promise(() => Promise.all(owners.map((owner) => lease(leaseDir, subnet, owner))))
      assert.strictEqual(new Set(ips).size, 13)
      assert.isFalse(ips.includes(undefined))
      // Full: one more claimant gets nothing, and an owner asking again keeps its own.
      assert.isUndefined(yield* Effect.promise(() => lease(leaseDir, subnet, { dataDir: dir, sandboxId: "late" })))
      assert.strictEqual(yield* Effect.promise(() => lease(leaseDir, subnet, owners[3]!, ips[3])), ips[3])
      // s5's folder disappears (its agent was removed): its address becomes free for "late".
      yield* Effect.promise(() => Fs.rm(NodePath.join(dir, "sandboxes", "s5"), { recursive: true }))
      assert.strictEqual(
        yield* Effect.promise(() => lease(leaseDir, subnet, { dataDir: dir, sandboxId: "late" })),
        ips[5]
      )
      // Release only frees a lease its owner holds.
      yield* Effect.promise(() => release(leaseDir, ips[5]!, owners[5]!))
      assert.isTrue(FsSync.existsSync(NodePath.join(leaseDir, ips[5]!)))
      yield* Effect.promise(() => release(leaseDir, ips[5]!, { dataDir: dir, sandboxId: "late" }))
      assert.isFalse(FsSync.existsSync(NodePath.join(leaseDir, ips[5]!)))
    }))
})
