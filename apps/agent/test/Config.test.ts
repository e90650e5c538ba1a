import { assert, describe, it } from "@effect/vitest"
import { HostId } from "@svc/domain/Ids"
import { imagesAllocatedBytes } from "@svc/host/Driver/Disk"
import { ConfigProvider, Effect, Exit, Schema } from "effect"
import * as FsSync from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { AgentConfig, hostIdFromHostname } from "../src/Config.ts"

const fromEnv = (env: Record<string, string>) =>
  Effect.gen(function*() {
    return yield* AgentConfig
  }).pipe(
    Effect.provide(AgentConfig.fromEnv),
    Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))
  )

describe("AgentConfig", () => {
  it("derives a stable, valid host id from the machine name", () => {
    const a = hostIdFromHostname("build-01")
    assert.strictEqual(a, hostIdFromHostname("build-01"))
    assert.notStrictEqual(a, hostIdFromHostname("build-02"))
    assert.isTrue(Schema.is(HostId)(a))
    // Also a valid driver host id (it names cgroups): at most 32 characters.
    assert.isAtMost(a.length, 32)
    assert.isTrue(Schema.is(HostId)(hostIdFromHostname("")))
  })

  it.effect("defaults: host id from the hostname, local region, capacity from the machine, any port", () =>
    Effect.gen(function*() {
      const config = yield* fromEnv({})
      assert.strictEqual(config.hostId, hostIdFromHostname(Os.hostname()))
      assert.strictEqual(config.region, "local")
      assert.strictEqual(config.datacenter, "local-1")
      assert.strictEqual(config.port, 0)
      // cpu is a cap, not a reservation: the cores are offered 8 times over.
      assert.strictEqual(config.capacity.cpu, Os.availableParallelism() * 8)
      assert.strictEqual(config.cpuOvercommit, 8)
      assert.strictEqual(config.allowUnlimited, false)
      assert.strictEqual(config.capacity.ramMb, Math.floor(Os.totalmem() / 1024 ** 2))
      assert.isAtLeast(config.capacity.diskGb, 1)
      assert.match(config.dataDir, new RegExp(`/hosts/${config.hostId}$`))
      // Sandbox disk images are sparse: the capacity stays within the data dir's free space
      // (plus what this host's images already hold).
      let existing = config.dataDir
      while (!FsSync.existsSync(existing)) existing = NodePath.dirname(existing)
      const free = FsSync.statfsSync(existing)
      const held = imagesAllocatedBytes(NodePath.join(config.dataDir, "sandboxes"))
      assert.isAtMost(config.capacity.diskGb, (free.bavail * free.bsize + held) / 1024 ** 3)
      assert.strictEqual(config.poolSize, 4)
      assert.strictEqual(config.allowNoFirewall, false)
      assert.strictEqual(config.maxTransfers, 32)
      assert.strictEqual(config.imageCacheDir, undefined)
    }))

  it.effect("reads every variable", () =>
    Effect.gen(function*() {
      const config = yield* fromEnv({
        SVC_HOST_ID: "host_01m7zzzzzzzzzzzzzzzzzzzzzz",
        SVC_REGION: "eu-west",
        SVC_DATACENTER: "eu-west-2",
        SVC_HOST_CPU: "8",
        SVC_HOST_RAM_MB: "16384",
        SVC_HOST_DISK_GB: "200",
        SVC_AGENT_PORT: "7070",
        SVC_AGENT_HOST: "0.0.0.0",
        SVC_AGENT_DATA_DIR: "/var/lib/svc/host",
        SVC_AGENT_HEARTBEAT: "500ms",
        SVC_AGENT_CONCURRENCY: "2",
        SVC_AGENT_POOL_SIZE: "3",
        SVC_AGENT_ALLOW_NO_FIREWALL: "1",
        SVC_HOST_CPU_OVERCOMMIT: "1.5",
        SVC_AGENT_ALLOW_UNLIMITED: "1",
        SVC_AGENT_MAX_TRANSFERS: "12",
        SVC_AGENT_MAX_TRANSFERS_PER_ORG: "4",
        SVC_AGENT_TRANSFER_IDLE_TIMEOUT: "45s",
        SVC_AGENT_METRICS_INTERVAL: "2s",
        SVC_IMAGE_CACHE_DIR: "/var/cache/svc/images",
        SVC_SHARED_VOLUMES_DIR: "/var/lib/svc/shared-volumes",
        SVC_SANDBOX_UID_SLOTS: "512",
        SVC_EGRESS_DEFAULT: "deny",
        SVC_EGRESS_ALLOWED_SUBNETS: "198.51.100.0/24, 2001:db8::/32",
        SVC_EGRESS_HOSTS_FILE: "/etc/svc/egress-hosts",
        SVC_EGRESS_UPSTREAM_CA_FILE: "/etc/svc/upstream-ca.pem",
        SVC_EGRESS_PORT: "16001",
        SVC_EGRESS_DNS_PORT: "16053",
        SVC_EGRESS_MAX_SANDBOX_CONNECTIONS: "64",
        SVC_EGRESS_MAX_CONNECTIONS: "1000",
        SVC_EGRESS_IDLE_TIMEOUT: "90s"
      })
      assert.deepStrictEqual(
        { ...config },
        {
          hostId: "host_01m7zzzzzzzzzzzzzzzzzzzzzz",
          region: "eu-west",
          datacenter: "eu-west-2",
          version: config.version,
          capacity: { cpu: 12, ramMb: 16384, diskGb: 200 },
          cpuOvercommit: 1.5,
          allowUnlimited: true,
          exitCheckMs: 500,
          metricsIntervalMs: 2000,
          port: 7070,
          listenHost: "0.0.0.0",
          advertiseHost: "127.0.0.1",
          dataDir: "/var/lib/svc/host",
          heartbeatMs: 500,
          concurrency: 2,
          poolSize: 3,
          allowNoFirewall: true,
          maxTransfers: 12,
          maxTransfersPerOrg: 4,
          transferIdleMs: 45_000,
          imageCacheDir: "/var/cache/svc/images",
          sharedVolumesDir: "/var/lib/svc/shared-volumes",
          egress: {
            defaultAction: "deny",
            allowedSubnets: [
              { address: "198.51.100.0", prefix: 24, family: "ipv4" },
              { address: "2001:db8::", prefix: 32, family: "ipv6" }
            ],
            hostsFile: "/etc/svc/egress-hosts",
            upstreamCaFile: "/etc/svc/upstream-ca.pem",
            tcpPort: 16001,
            dnsPort: 16053,
            maxConnectionsPerSandbox: 64,
            maxConnections: 1000,
            idleTimeoutSeconds: 90
          },
          bridge: "svcbr0",
          subnet: "10.213.0.0/16",
          uidBase: 0x7fff0000,
          uidSlots: 512
        }
      )
    }))

  it.effect("refuses invalid values", () =>
    Effect.gen(function*() {
      for (
        const env of [
          { SVC_HOST_ID: "my-host" },
          { SVC_HOST_ID: "host_0000000000000000000000000/" },
          { SVC_AGENT_PORT: "70000" },
          { SVC_AGENT_PORT: "-1" },
          { SVC_HOST_CPU: "0" },
          { SVC_HOST_RAM_MB: "lots" },
          { SVC_REGION: "eu west" },
          { SVC_AGENT_DATA_DIR: "/with space" },
          { SVC_AGENT_HEARTBEAT: "10ms" },
          { SVC_AGENT_HEARTBEAT: "500" },
          { SVC_AGENT_HEARTBEAT_MS: "500" },
          { SVC_SANDBOX_UID_BASE: "1000" },
          { SVC_SANDBOX_UID_SLOTS: "0" },
          { SVC_SANDBOX_UID_SLOTS: "40000" },
          { SVC_AGENT_CONCURRENCY: "0" },
          { SVC_AGENT_POOL_SIZE: "-1" },
          { SVC_AGENT_POOL_SIZE: "65" },
          { SVC_AGENT_POOL_SIZE: "four" },
          { SVC_AGENT_ALLOW_NO_FIREWALL: "maybe" },
          { SVC_HOST_CPU_OVERCOMMIT: "0.5" },
          { SVC_HOST_CPU_OVERCOMMIT: "65" },
          { SVC_HOST_CPU_OVERCOMMIT: "many" },
          { SVC_AGENT_ALLOW_UNLIMITED: "yes" },
          { SVC_AGENT_MAX_TRANSFERS: "0" },
          { SVC_EGRESS_MAX_SANDBOX_CONNECTIONS: "0" },
          { SVC_EGRESS_MAX_CONNECTIONS: "many" },
          { SVC_EGRESS_IDLE_TIMEOUT: "500ms" }
        ]
      ) {
        const exit = yield* Effect.exit(fromEnv(env))
        assert.isTrue(Exit.isFailure(exit), JSON.stringify(env))
      }
    }))
})
