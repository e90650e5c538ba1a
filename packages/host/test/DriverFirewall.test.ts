/**
 * The sandbox firewall (`src/Driver/Firewall.ts`), tried from inside real sandboxes the way a
 * tenant would: busybox `nc` at every address of the host, at another sandbox, at private and
 * metadata ranges and beyond the machine. Every probe list has a positive control (the same
 * probe reaching something it may reach, or reaching the host once the firewall is gone), so a
 * refused probe is the firewall's doing and not a broken probe.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Context, Effect, Exit, Layer } from "effect"
import { execFile, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as Net from "node:net"
import * as Os from "node:os"
import * as NodePath from "node:path"
import type { SandboxDriver } from "../src/Driver.ts"
import type { DriverConfig } from "../src/Driver/Config.ts"
import {
  BLOCKED_IPV4,
  BLOCKED_IPV6,
  type FirewallSettings,
  installFirewall,
  renderRuleset,
  tableName
} from "../src/Driver/Firewall.ts"
import { parseSubnet } from "../src/Driver/Network.ts"
import { makeTestDriver, sh, spec, TestDriver, text, uniqueId, withSandbox, withSpawner } from "./fixtures/support.ts"

const NFT = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"].find((path) => FsSync.existsSync(path)) ?? "/usr/sbin/nft"

/** A host command that must succeed. */
const host = (file: string, args: ReadonlyArray<string>, input?: string) =>
  Effect.callback<string, Error>((resume) => {
    const child = execFile(file, [...args], { timeout: 20_000 }, (error, stdout, stderr) => {
      if (error) resume(Effect.fail(new Error(`${file} ${args.join(" ")}: ${error.message} ${stderr}`)))
      else resume(Effect.succeed(stdout))
    })
    if (input !== undefined) child.stdin?.end(input)
  })

/** A host command whose failure is fine (clean-up). */
const hostQuiet = (file: string, args: ReadonlyArray<string>) => host(file, args).pipe(Effect.ignore)

const nft = (...args: ReadonlyArray<string>) => host(NFT, args)
const nftTables = nft("list", "tables").pipe(
  Effect.map((out) => out.split("\n").map((l) => l.trim()).filter((l) => l !== ""))
)

/** TCP servers on 0.0.0.0:port and [::]:port (IPv6 only) that tell who connected. */
const hostListeners = Effect.acquireRelease(
  Effect.promise(async () => {
    const peers: Array<string> = []
    const make = () =>
      Net.createServer((socket) => {
        peers.push(socket.remoteAddress ?? "?")
        socket.end("host-secret\n")
      })
    for (let tries = 0;; tries++) {
      const v4 = make()
      const v6 = make()
      const port = await new Promise<number>((resolve) =>
        v4.listen(0, "0.0.0.0", () => resolve((v4.address() as Net.AddressInfo).port))
      )
      const ok = await new Promise<boolean>((resolve) => {
        v6.once("error", () => resolve(false))
        v6.listen({ port, host: "::", ipv6Only: true }, () => resolve(true))
      })
      if (ok) return { port, peers, close: () => (v4.close(), v6.close()) }
      v4.close()
      if (tries > 5) throw new Error("no port free on both 0.0.0.0 and [::]")
    }
  }),
  (listeners) => Effect.sync(() => listeners.close())
)

/** The host's own interface addresses, without the host ends of sandboxes' veths (they come and go). */
const hostAddresses = () =>
  Object.entries(Os.networkInterfaces()).flatMap(([name, addresses]) =>
    /^sv[0-9a-f]{8}$/.test(name) ? [] : (addresses ?? []).filter((a) => !a.internal).map((a) => ({ name, ...a }))
  )

/** An address as `nc` takes it: link-local IPv6 needs the sandbox's interface as its scope. */
const ncAddress = (address: string) => (address.startsWith("fe80:") ? `${address}%eth0` : address)

interface Target {
  readonly label: string
  readonly address: string
  readonly port: number
}

/**
 * Every target probed at once from inside the sandbox (`nc -w 2`), each one's output apart:
 * what the far end sent, or nc's complaint.
 */
const probe = (driver: SandboxDriver["Service"], sandboxId: string, targets: ReadonlyArray<Target>, prelude = "") =>
  Effect.gen(function*() {
    const lines = targets.map((t, i) =>
      `(echo probe | nc -w 2 ${
        ncAddress(t.address)
      } ${t.port} >/tmp/probe.${i} 2>&1; echo "exit=$?" >>/tmp/probe.${i}) & probes="$probes $!"`
    )
    const script = [
      prelude,
      ...lines,
      // Only the probes: a server the prelude started stays in the background.
      "wait $probes",
      ...targets.map((_, i) => `echo "@@${i}"; cat /tmp/probe.${i}; rm -f /tmp/probe.${i}`)
    ].join("\n")
    const result = yield* driver.exec(sandboxId, sh(script, { timeoutMs: 30_000 }))
    const out = text(result.stdout)
    const parts = out.split(/^@@(\d+)\n/m)
    const byLabel = new Map<string, string>()
    for (let i = 1; i < parts.length; i += 2) byLabel.set(targets[Number(parts[i])]!.label, parts[i + 1] ?? "")
    assert.strictEqual(byLabel.size, targets.length, `probe output: ${out} ${text(result.stderr)}`)
    return byLabel
  })

const assertReached = (outputs: Map<string, string>, label: string, secret: string) =>
  assert.include(outputs.get(label), secret, `${label} should have been reached: ${outputs.get(label)}`)
const assertRefused = (outputs: Map<string, string>, label: string, secret: string) => {
  assert.notInclude(outputs.get(label), secret, `${label} was reached`)
  assert.notInclude(outputs.get(label), "exit=0", `${label}: nc succeeded: ${outputs.get(label)}`)
}

/** A running sandbox's `nc -ll` server (persistent) that answers `secret` to anyone connecting. */
const listenInside = (driver: SandboxDriver["Service"], sandboxId: string, port: number, secret: string) =>
  Effect.gen(function*() {
    const started = yield* driver.exec(
      sandboxId,
      sh(`nc -ll -p ${port} -e echo ${secret} </dev/null >/dev/null 2>&1 & sleep 0.2; netstat -ltn`)
    )
    assert.include(text(started.stdout), `:${port} `, text(started.stderr))
  })

/** Connects from the host and returns what the far end sent. */
const hostConnect = (address: string, port: number) =>
  Effect.callback<string, Error>((resume) => {
    let got = ""
    const socket = Net.connect({ host: address, port, timeout: 5000 })
    socket.on("data", (chunk: Buffer) => (got += chunk.toString("utf8")))
    socket.on("end", () => resume(Effect.succeed(got)))
    socket.on("timeout", () => socket.destroy(new Error("timeout")))
    socket.on("error", (e) => resume(Effect.fail(e)))
  })

describe("firewall ruleset (pure)", () => {
  const settings: FirewallSettings = { bridge: "svcbr0", subnet: parseSubnet("10.213.0.0/16") }

  it("renders one table that replaces itself in one transaction", () => {
    const script = renderRuleset(settings)
    assert.strictEqual(script, renderRuleset(settings))
    const lines = script.split("\n")
    assert.deepStrictEqual(lines.slice(0, 3), [
      "table inet svc_svcbr0",
      "delete table inet svc_svcbr0",
      "table inet svc_svcbr0 {"
    ])
    // Nothing outside its own table: no flush ruleset, no other table.
    assert.notMatch(script, /flush|ruleset/)
    assert.deepStrictEqual([...new Set(script.match(/\btable \S+ \S+/g))], ["table inet svc_svcbr0"])
    assert.include(script, `iifname "svcbr0" jump sandbox_to_host`)
    assert.include(script, `ip saddr 10.213.0.0/16 ct state established,related accept`)
    assert.include(script, `iifname "svcbr0" jump sandbox_forward`)
    assert.include(script, `oifname "svcbr0" counter drop`)
    // Both sandbox chains end in a drop; nothing from the bridge is accepted but replies.
    for (const chain of ["sandbox_to_host", "sandbox_forward"]) {
      const body = script.slice(script.indexOf(`chain ${chain} {`)).split("}")[0]!.trim().split("\n")
      assert.strictEqual(body.at(-1)!.trim(), "counter drop", chain)
      const rules = body.slice(1).filter((l) => !l.trim().startsWith("#") && !l.includes("ct state established"))
      assert.notInclude(rules.join("\n"), "accept", chain)
    }
    assert.strictEqual(tableName("sb-1"), "svc_sb-1")
  })

  it("blocks the private, link-local, CGNAT, metadata and loopback ranges", () => {
    for (
      const range of ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"]
    ) {
      assert.include(BLOCKED_IPV4, range)
    }
    for (const range of ["fc00::/7", "fe80::/10", "::/127"]) assert.include(BLOCKED_IPV6, range)
    const script = renderRuleset(settings)
    assert.include(script, `elements = { ${BLOCKED_IPV4.join(", ")} }`)
    assert.include(script, `elements = { ${BLOCKED_IPV6.join(", ")} }`)
  })

  it("puts a later egress proxy's port in front of the host drop", () => {
    const script = renderRuleset({ ...settings, hostTcpPorts: [3128, 443, 3128] })
    const accept = script.indexOf("ip daddr 10.213.0.1 tcp dport { 443, 3128 } ct state new accept")
    assert.isAbove(accept, script.indexOf("chain sandbox_to_host {"))
    assert.isBelow(accept, script.indexOf("counter drop", script.indexOf("chain sandbox_to_host {")))
  })
})

describe("firewall install", () => {
  it.live("the kernel accepts the rendered ruleset (nft --check)", () =>
    Effect.gen(function*() {
      const script = renderRuleset({
        bridge: uniqueId("fw").slice(0, 15),
        subnet: parseSubnet("10.214.0.0/24"),
        hostTcpPorts: [3128]
      })
      yield* host(NFT, ["--check", "-f", "-"], script)
    }))
})

/** A bridge of this test file's own, so the test can take its firewall away and put it back. */
class OwnBridge extends Context.Service<OwnBridge, {
  readonly driver: SandboxDriver["Service"]
  readonly config: DriverConfig["Service"]
  readonly settings: FirewallSettings
}>()("@svc/host/test/DriverFirewall/OwnBridge") {
  static readonly layer = Layer.effect(
    OwnBridge,
    Effect.gen(function*() {
      const bridge = `svcfw${randomBytes(3).toString("hex")}`
      const subnet = `10.214.${randomBytes(1)[0]}.0/24`
      const dataDir = yield* Effect.acquireRelease(
        Effect.promise(() => Fs.mkdtemp("/tmp/svc-firewall-test-")),
        (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
      )
      // Released after the driver (finalizers run in reverse): the bridge and its table go.
      yield* Effect.addFinalizer(() =>
        Effect.all([
          hostQuiet("ip", ["link", "del", bridge]),
          hostQuiet(NFT, ["delete", "table", "inet", tableName(bridge)])
        ])
      )
      const { config, driver } = yield* makeTestDriver({
        dataDir,
        driverConfig: { bridge, subnet, leaseDir: NodePath.join(dataDir, "leases") }
      })
      return { driver, config, settings: { bridge, subnet: parseSubnet(subnet) } }
    })
  )
}

layer(TestDriver.layer(), { excludeTestServices: true })("firewall on the machine's bridge", (it) => {
  it.effect("a sandbox reaches no host address, no other sandbox, no private or metadata range; the host reaches it", () =>
    Effect.gen(function*() {
      const { config, driver } = yield* TestDriver
      const a = uniqueId("fwa")
      const b = uniqueId("fwb")
      yield* withSandbox(driver, spec(a))
      const infoB = yield* withSandbox(driver, spec(b))
      const listeners = yield* hostListeners
      yield* listenInside(driver, b, 7000, "b-secret")

      // No IPv6 address on the sandbox's eth0 (only lo's ::1), and none to come: its address
      // generation is off (1: none), set before the link came up.
      const inet6 = yield* driver.exec(a, sh("cat /proc/net/if_inet6; cat /proc/sys/net/ipv6/conf/eth0/addr_gen_mode"))
      assert.notMatch(text(inet6.stdout), /eth0/)
      assert.match(text(inet6.stdout), /^1$/m)

      const gateway = parseSubnet(config.subnet).gateway
      const targets: Array<Target> = [
        { label: "gateway", address: gateway, port: listeners.port },
        ...hostAddresses().map((a) => ({ label: `${a.name} ${a.address}`, address: a.address, port: listeners.port })),
        { label: "sandbox b", address: infoB.internalIp, port: 7000 },
        { label: "metadata v4", address: "169.254.169.254", port: 80 },
        { label: "metadata v6", address: "fd00:ec2::254", port: 80 },
        { label: "private 10/8", address: "10.0.0.1", port: listeners.port },
        { label: "private 192.168/16", address: "192.168.0.1", port: listeners.port },
        { label: "cgnat", address: "100.64.0.1", port: listeners.port },
        // Positive controls: the sandbox's own loopback, IPv4 and IPv6.
        { label: "own loopback", address: "127.0.0.1", port: 7001 },
        { label: "own loopback v6", address: "::1", port: 7001 }
      ]
      assert.isTrue(
        targets.some((t) => t.address.startsWith("fe80:")),
        "the bridge's IPv6 link-local is among the targets"
      )
      const outputs = yield* probe(
        driver,
        a,
        targets,
        "nc -ll -p 7001 -e echo self-ok </dev/null >/dev/null 2>&1 & sleep 0.2"
      )
      assertReached(outputs, "own loopback", "self-ok")
      assertReached(outputs, "own loopback v6", "self-ok")
      for (const target of targets.filter((t) => !t.label.startsWith("own"))) {
        assertRefused(outputs, target.label, target.label === "sandbox b" ? "b-secret" : "host-secret")
      }
      assert.deepStrictEqual(listeners.peers, [])

      // The host still reaches a sandbox's listener (exposed ports), and its replies come back.
      assert.strictEqual(yield* hostConnect(infoB.internalIp, 7000), "b-secret\n")
      // The machine-wide table is there, and stays (nothing removes it when a driver stops).
      assert.include(yield* nftTables, `table inet ${tableName(config.bridge)}`)
    }))
})

layer(OwnBridge.layer, { excludeTestServices: true })("firewall alone, on a bridge of this test", (it) => {
  it.effect(
    "with the sandbox's own layers undone (a route out, IPv6 on), the firewall alone stops every probe",
    () =>
      Effect.gen(function*() {
        const { driver, settings } = yield* OwnBridge
        const { bridge, subnet } = settings
        const id = uniqueId("fwx")
        const info = yield* withSandbox(driver, spec(id))
        assert.isDefined(info.pid)
        const listeners = yield* hostListeners

        // Somewhere beyond the machine: a network namespace behind a veth, one public-looking and
        // one private address, reached through forwarding enabled on this test's interfaces only.
        const tag = randomBytes(3).toString("hex")
        const ns = `svcfw-out-${tag}`
        const veth = `svcfo${tag}`
        // The lower half of the range: the egress tests' fake hosts take /30s of the upper half.
        const k = randomBytes(1)[0]! & 31
        const publicIp = `198.51.100.${4 * k + 2}`
        const privateIp = `172.31.${k}.2`
        yield* Effect.acquireRelease(
          Effect.gen(function*() {
            yield* host("ip", ["netns", "add", ns])
            yield* host("ip", ["link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            yield* host("ip", ["addr", "add", `198.51.100.${4 * k + 1}/30`, "dev", veth])
            yield* host("ip", ["addr", "add", `172.31.${k}.1/24`, "dev", veth])
            yield* host("ip", ["link", "set", veth, "up"])
            yield* host("ip", ["-n", ns, "addr", "add", `${publicIp}/30`, "dev", "eth0"])
            yield* host("ip", ["-n", ns, "addr", "add", `${privateIp}/24`, "dev", "eth0"])
            yield* host("ip", ["-n", ns, "link", "set", "eth0", "up"])
            yield* host("ip", ["-n", ns, "route", "add", "default", "via", `198.51.100.${4 * k + 1}`])
            for (const dev of [bridge, veth]) {
              yield* Effect.promise(() => Fs.writeFile(`/proc/sys/net/ipv4/conf/${dev}/forwarding`, "1"))
            }
          }),
          () => Effect.all([hostQuiet("ip", ["link", "del", veth]), hostQuiet("ip", ["netns", "del", ns])])
        )
        yield* Effect.acquireRelease(
          Effect.sync(() =>
            spawn("ip", [
              "netns",
              "exec",
              ns,
              "/bin/busybox",
              "nc",
              "-ll",
              "-p",
              "7100",
              "-e",
              "echo",
              "outside-secret"
            ], { stdio: "ignore" })
          ),
          (child) => Effect.sync(() => child.kill("SIGKILL"))
        )

        // Undo what the sandbox's own set-up does, as if it had failed: IPv6 on eth0 and default
        // routes through the bridge (root inside cannot do this: it has no CAP_NET_ADMIN).
        const bridgeLinkLocal = yield* waitForLinkLocal(bridge)
        yield* host("nsenter", [
          "-t",
          String(info.pid),
          "-n",
          "sh",
          "-c",
          [
            "set -e",
            "echo 0 > /proc/sys/net/ipv6/conf/eth0/accept_dad",
            "ip link set eth0 down",
            "ip link set eth0 addrgenmode eui64",
            "ip link set eth0 up",
            `ip route add default via ${subnet.gateway}`,
            `ip -6 route add default via ${bridgeLinkLocal} dev eth0`
          ].join("\n")
        ])

        const defaultDevice = FsSync.readFileSync("/proc/net/route", "utf8").split("\n").slice(1)
          .map((l) => l.split("\t")).find((f) => f[1] === "00000000")?.[0]
        const machine = hostAddresses().filter((a) => a.name === defaultDevice && !a.address.startsWith("fe80:"))
        // Reached without the firewall (the positive control), refused with it.
        const mustReach: Array<Target> = [
          { label: "gateway", address: subnet.gateway, port: listeners.port },
          { label: "bridge link-local", address: bridgeLinkLocal, port: listeners.port },
          ...machine.map((a) => ({ label: `${a.name} ${a.address}`, address: a.address, port: listeners.port })),
          { label: "beyond, public", address: publicIp, port: 7100 },
          { label: "beyond, private", address: privateIp, port: 7100 }
        ]
        const others: Array<Target> = [
          ...hostAddresses().filter((a) => a.name !== defaultDevice && a.name !== bridge && a.name !== veth)
            .map((a) => ({ label: `${a.name} ${a.address}`, address: a.address, port: listeners.port })),
          { label: "metadata v4", address: "169.254.169.254", port: 80 },
          { label: "metadata v6", address: "fd00:ec2::254", port: 80 }
        ]
        assert.isTrue(machine.length > 0, `addresses of ${defaultDevice}`)
        const secretOf = (t: Target) => (t.port === 7100 ? "outside-secret" : "host-secret")

        // With the firewall the driver installed at start: nothing answers.
        assert.include(yield* nftTables, `table inet ${tableName(bridge)}`)
        const blocked = yield* probe(driver, id, [...mustReach, ...others])
        for (const target of [...mustReach, ...others]) assertRefused(blocked, target.label, secretOf(target))
        assert.deepStrictEqual(listeners.peers, [])
        // The host still reaches the sandbox.
        yield* listenInside(driver, id, 7000, "inside-secret")
        assert.strictEqual(yield* hostConnect(info.internalIp, 7000), "inside-secret\n")

        // Without it (this test's own table only), the same probes get through. Neighbours the
        // firewall kept from answering are forgotten first, on both sides.
        yield* nft("delete", "table", "inet", tableName(bridge))
        yield* host("ip", ["neigh", "flush", "dev", bridge])
        yield* host("nsenter", ["-t", String(info.pid), "-n", "ip", "neigh", "flush", "dev", "eth0"])
        const open = yield* probe(driver, id, mustReach)
        for (const target of mustReach) assertReached(open, target.label, secretOf(target))
        assert.isAbove(listeners.peers.length, 0)

        // Put back the way an agent does at start: closed again.
        yield* installFirewall({ nft: NFT, settings, allowNoFirewall: false })
        const again = yield* probe(driver, id, mustReach)
        for (const target of mustReach) assertRefused(again, target.label, secretOf(target))
      }),
    120_000
  )

  it.effect("installs idempotently: one table, same rules, foreign tables untouched, kept after the driver stops", () =>
    Effect.gen(function*() {
      const { config, settings } = yield* OwnBridge
      const table = tableName(settings.bridge)
      const foreign = `svcfw_foreign_${randomBytes(3).toString("hex")}`
      yield* Effect.acquireRelease(
        host(
          NFT,
          ["-f", "-"],
          [
            `table inet ${foreign} {`,
            `  chain input { type filter hook input priority 10; policy accept; iifname "${settings.bridge}" counter; }`,
            `}`,
            // A rule of someone else's, on the same hook and the same bridge.
            `table ip ${foreign} {`,
            `  chain forward { type filter hook forward priority 0; policy accept; oifname "${settings.bridge}" counter accept; }`,
            `}`
          ].join("\n") + "\n"
        ),
        () =>
          Effect.all([
            hostQuiet(NFT, ["delete", "table", "inet", foreign]),
            hostQuiet(NFT, ["delete", "table", "ip", foreign])
          ])
      )
      const foreignBefore = [
        yield* nft("-a", "list", "table", "inet", foreign),
        yield* nft("-a", "list", "table", "ip", foreign)
      ]
      yield* installFirewall({ nft: NFT, settings, allowNoFirewall: false })
      const ours = yield* nft("list", "table", "inet", table)

      // Gone (a reboot): another agent on the bridge starts and stops; its rules stay.
      yield* nft("delete", "table", "inet", table)
      yield* Effect.scoped(
        makeTestDriver({ driverConfig: { bridge: config.bridge, subnet: config.subnet, leaseDir: config.leaseDir } })
      )
      assert.strictEqual(yield* nft("list", "table", "inet", table), ours)

      // Again, and several agents at once (each its own nft transaction): the same one table.
      yield* installFirewall({ nft: NFT, settings, allowNoFirewall: false })
      yield* Effect.all(
        Array.from({ length: 8 }, () => installFirewall({ nft: NFT, settings, allowNoFirewall: false })),
        {
          concurrency: "unbounded"
        }
      )
      assert.strictEqual((yield* nftTables).filter((l) => l === `table inet ${table}`).length, 1)
      assert.strictEqual(yield* nft("list", "table", "inet", table), ours)
      // Someone else's tables and rules, same hooks, same bridge: not even recreated (same handles).
      assert.deepStrictEqual([
        yield* nft("-a", "list", "table", "inet", foreign),
        yield* nft("-a", "list", "table", "ip", foreign)
      ], foreignBefore)
    }))
})

describe("firewall failures", () => {
  const settings: FirewallSettings = { bridge: "svcfwnone", subnet: parseSubnet("10.214.0.0/24") }

  it.live("the driver cannot start without nft, or when nft fails, unless the operator allows it", () =>
    Effect.gen(function*() {
      // Run on its own, as the driver's start runs it: through the spawner.
      yield* withSpawner
      const missing = yield* Effect.exit(installFirewall({ nft: undefined, settings, allowNoFirewall: false }))
      assert.isTrue(Exit.isFailure(missing))
      const missingError = Exit.isFailure(missing) ? String(missing.cause) : ""
      assert.include(missingError, "DriverFailure")
      assert.include(missingError, "nft is not installed")
      assert.include(missingError, "SVC_AGENT_ALLOW_NO_FIREWALL=1")

      const failing = yield* Effect.exit(installFirewall({ nft: "/bin/false", settings, allowNoFirewall: false }))
      assert.isTrue(Exit.isFailure(failing))
      assert.include(Exit.isFailure(failing) ? String(failing.cause) : "", "exit 1")

      const allowed = yield* installFirewall({ nft: undefined, settings, allowNoFirewall: true })
      assert.strictEqual(allowed._tag, "Skipped")
      const allowedFailing = yield* installFirewall({ nft: "/bin/false", settings, allowNoFirewall: true })
      assert.strictEqual(allowedFailing._tag, "Skipped")
      assert.notInclude(yield* nftTables, `table inet ${tableName(settings.bridge)}`)
    }).pipe(Effect.scoped))
})

/** The bridge's IPv6 link-local once duplicate address detection is over. */
const waitForLinkLocal = (bridge: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100; i++) {
      const out = yield* host("ip", ["-6", "-o", "addr", "show", "dev", bridge, "scope", "link"])
      const match = /inet6 (fe80:[0-9a-f:]+)\/64/.exec(out)
      if (match !== null && !/tentative/.test(out)) return match[1]!
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.die(new Error(`no IPv6 link-local on ${bridge}`))
  })
