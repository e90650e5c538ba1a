/**
 * The host agent role: runs and reaches into this host's sandboxes for the control plane.
 *
 * Built in this order (and torn down in the reverse one):
 *   config → driver (bubblewrap over the host's data dir; refused when the host cannot enforce
 *   the memory, cpu, pids and disk limits, unless allowed) → journal, lifecycle, reporter →
 *   data plane (HTTP) → host record + heartbeat in `hosts`, worker heartbeat in `workers` →
 *   command consumer (ensures the AGENT stream and its consumer, reconciles, then consumes)
 *   beside the exit watcher (sandboxes whose init died, reported `exited`) and the observer
 *   (each running sandbox's metric samples and `start_cmd` output, `SandboxObserver.ts`).
 *
 * Stopping stops consuming and heartbeating and ends the warm pool; sandboxes keep running (they
 * are detached from the agent's process) and the next agent on this host id and data dir finds
 * them again, unless the agent was told to stop them (`svc dev`).
 *
 * `AgentRole.layer` is the whole role: configured from the environment (`Config.ts`), with its
 * NATS connection (NATS_URL, SVC_NATS_PREFIX) and the keys (`SVC_ENCRYPTION_KEYS`, required: a
 * create's env comes sealed and the driver keeps it sealed on disk); what `node
 * apps/agent/src/main.ts`, `svc agent` and `svc dev` run. The agent holds no database connection.
 */
import { updateConsumerDepth } from "@svc/bus/Metrics"
import { Nats } from "@svc/bus/Nats"
import { WorkerHeartbeat } from "@svc/bus/Workers"
import { SecretBox } from "@svc/crypto/SecretBox"
import { claimEgressBridge, Egress, ensureEgressCa } from "@svc/egress/Egress"
import { AGENT_STREAM, agentConsumer, type HostLimits } from "@svc/host-protocol/Protocol"
import { SandboxActivity } from "@svc/host/Activity"
import { SandboxDriver } from "@svc/host/Driver"
import { BubblewrapDriver } from "@svc/host/Driver/Bubblewrap"
import { DriverConfig } from "@svc/host/Driver/Config"
import { parseSubnet } from "@svc/host/Driver/Network"
import { outputBytesKept } from "@svc/host/Driver/Processes"
import * as Metrics from "@svc/telemetry/Metrics"
import * as Telemetry from "@svc/telemetry/Telemetry"
import { Effect, Layer, Metric, Schema } from "effect"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { ActivityReporter } from "./ActivityReporter.ts"
import { CommandConsumer } from "./Commands.ts"
import { AgentConfig, type AgentOptions, InvalidAgentConfig } from "./Config.ts"
import { DataPlaneEndpoint, type DataPlaneOptions } from "./DataPlaneEndpoint.ts"
import { Journal } from "./Journal.ts"
import { LocalSandboxes } from "./LocalSandboxes.ts"
import { HostRegistry } from "./Registry.ts"
import { Reporter } from "./Reporter.ts"
import { SandboxObserver } from "./SandboxObserver.ts"
import { TemplateImages } from "./TemplateImages.ts"
import { TemplatePools } from "./TemplatePools.ts"
import { VolumeReaper } from "./Volumes.ts"
import { ExitWatcher } from "./Watcher.ts"

/** Where an agent keeps its egress state (the CA, the proxy's socket, the front's build). */
export const egressDir = (dataDir: string) => NodePath.join(dataDir, "egress")

/**
 * The driver's configuration from the agent's: its own data dir and cgroup names per host id;
 * with egress, the gateway ports the firewall redirects to and the CA the base template trusts.
 */
export const DriverConfigFromAgent = Layer.effect(
  DriverConfig,
  Effect.gen(function*() {
    const config = yield* AgentConfig
    const ca = config.egress === undefined ? undefined : yield* ensureEgressCa(egressDir(config.dataDir)).pipe(
      Effect.mapError((e) => new InvalidAgentConfig({ message: `egress: ${e.message}` }))
    )
    return yield* Effect.try({
      try: () =>
        DriverConfig.make({
          dataDir: config.dataDir,
          hostId: config.hostId,
          bridge: config.bridge,
          subnet: config.subnet,
          uidBase: config.uidBase,
          uidSlots: config.uidSlots,
          allowNoFirewall: config.allowNoFirewall,
          sharedVolumesDir: config.sharedVolumesDir,
          ...(config.egress !== undefined && ca !== undefined
            ? {
              egress: { tcpPort: config.egress.tcpPort, dnsPort: config.egress.dnsPort },
              trustedCaPem: ca.certPem
            }
            : {}),
          ...(config.cgroupRoot !== undefined ? { cgroupRoot: config.cgroupRoot } : {}),
          ...(config.imageCacheDir !== undefined ? { imageCacheDir: config.imageCacheDir } : {})
        }),
      catch: (e) => new InvalidAgentConfig({ message: `driver: ${e instanceof Error ? e.message : String(e)}` })
    })
  })
)

/** The agent will not run sandboxes its host cannot limit, unless its operator allows it. */
export class UnenforcedLimits extends Schema.TaggedError<UnenforcedLimits>()("UnenforcedLimits", {
  message: Schema.String
}) {}

const LIMITS = ["memory", "cpu", "pids", "disk"] as const

/** The limits of `HostLimits` that do not hold, as `name: why`. */
export const missingLimits = (limits: HostLimits): ReadonlyArray<string> =>
  LIMITS.filter((name) => limits[name] !== "enforced").map((name) => `${name}: ${limits[name]}`)

export const DriverFromAgent = Layer.effect(
  SandboxDriver,
  Effect.gen(function*() {
    const config = yield* AgentConfig
    const driver = yield* SandboxDriver
    const missing = missingLimits(driver.hostLimits)
    if (missing.length > 0) {
      if (!config.allowUnlimited) {
        return yield* new UnenforcedLimits({
          message:
            `this host cannot enforce every sandbox limit (cgroup ${driver.hostLimits.cgroup}; ${
              missing.join("; ")
            }): ` +
            "give the agent the cgroup controllers and loop devices, or set SVC_AGENT_ALLOW_UNLIMITED=1 to run sandboxes without these limits"
        })
      }
      yield* Effect.logWarning("agent: sandboxes run without some limits (SVC_AGENT_ALLOW_UNLIMITED)", { missing })
    }
    return driver
  })
).pipe(Layer.provide(BubblewrapDriver.layer.pipe(Layer.provide(DriverConfigFromAgent))))

/**
 * The sandboxes' egress proxy, once the driver has made the bridge (its gateway is where the
 * front and the resolver listen). Nothing without `egress` in the agent's settings.
 */
const EgressFromAgent = Layer.unwrap(
  Effect.gen(function*() {
    const config = yield* AgentConfig
    const egress = config.egress
    if (egress === undefined) return Layer.empty
    const driverConfig = DriverConfig.make({
      dataDir: config.dataDir,
      hostId: config.hostId,
      bridge: config.bridge,
      subnet: config.subnet
    })
    const subnet = parseSubnet(config.subnet)
    const hostAddresses = Object.values(Os.networkInterfaces()).flatMap((list) => list ?? []).map((entry) => ({
      address: entry.address.replace(/%.*$/, ""),
      prefix: entry.family === "IPv4" ? 32 : 128,
      family: entry.family === "IPv4" ? "ipv4" as const : "ipv6" as const
    }))
    return Egress.layer({
      ...egress,
      dir: egressDir(config.dataDir),
      gateway: subnet.gateway,
      leaseDir: driverConfig.leaseDir,
      platform: [
        { address: config.subnet.split("/")[0]!, prefix: subnet.prefix, family: "ipv4" },
        ...hostAddresses
      ]
    })
  })
)

/**
 * With egress, this agent's platform recorded for its bridge before the driver installs the
 * bridge's firewall: beside another platform's agent (on the bridge, or on another bridge with
 * the same subnet or ports) the agent does not start, and says why (@svc/egress/Owner).
 */
const EgressBridgeFromAgent = Layer.effectDiscard(
  Effect.gen(function*() {
    const config = yield* AgentConfig
    if (config.egress === undefined) return
    const driverConfig = DriverConfig.make({
      dataDir: config.dataDir,
      hostId: config.hostId,
      bridge: config.bridge,
      subnet: config.subnet
    })
    yield* claimEgressBridge({
      runDir: driverConfig.runDir,
      bridge: driverConfig.bridge,
      subnet: config.subnet,
      tcpPort: config.egress.tcpPort,
      dnsPort: config.egress.dnsPort,
      hostId: config.hostId
    })
  })
)

/** Everything after the configuration and the driver. */
const services = (options: { readonly dataPlane?: DataPlaneOptions }) => {
  const core = Layer.mergeAll(Journal.layer, Reporter.layer, TemplateImages.layer)
  const lifecycle = LocalSandboxes.layer.pipe(Layer.provideMerge(core))
  const dataPlane = DataPlaneEndpoint.layerWith(options.dataPlane ?? {}).pipe(Layer.provideMerge(SandboxActivity.layer))
  const workers = Layer.unwrap(
    Effect.gen(function*() {
      const config = yield* AgentConfig
      return WorkerHeartbeat.layer("agent", { prefix: `agent.${config.hostId}.`, version: config.version })
    })
  )
  const registered = Layer.mergeAll(HostRegistry.layer, workers).pipe(Layer.provideMerge(dataPlane))
  return Layer.mergeAll(
    CommandConsumer.layer,
    ExitWatcher.layer,
    VolumeReaper.layer,
    EgressFromAgent,
    SandboxObserver.layer,
    ActivityReporter.layer,
    TemplatePools.layer
  ).pipe(
    Layer.provideMerge(registered),
    Layer.provideMerge(lifecycle)
  )
}

/**
 * For `svc dev` (one machine, one developer: nothing it started outlives it): once the agent
 * has stopped (no command, exit check or pool entry in progress), each running sandbox of this
 * host is stopped, its file system kept; the next start reconciles them as stopped, and
 * `POST /v1/sandboxes/{id}/start` brings one back.
 */
const StopSandboxesOnStop = Layer.effectDiscard(
  Effect.gen(function*() {
    const driver = yield* SandboxDriver
    yield* Effect.addFinalizer(() =>
      driver.list.pipe(
        Effect.flatMap((sandboxes) =>
          Effect.forEach(sandboxes.filter((s) => s.status === "running"), (s) =>
            Effect.ignore(driver.stop(s.sandboxId)), {
            concurrency: 4,
            discard: true
          })
        ),
        Effect.ignore
      )
    )
  })
)

/** `/metrics`: this host's command consumer's depth, read at each scrape (the only consumer it may read). */
const CommandQueueDepth = Layer.unwrap(
  Effect.map(
    AgentConfig,
    (config) => Metrics.collector("queues", updateConsumerDepth(AGENT_STREAM, agentConsumer(config.hostId)))
  )
)

/** What the agent keeps of its sandboxes' background-process output (at most 16 MiB per sandbox). */
export const ProcessOutputBytes = Metric.gauge("svc_agent_process_output_bytes", {
  description: "Bytes of background-process output this agent keeps, all its sandboxes together"
})

/** `/metrics`: the output kept, read at each scrape. */
const ProcessOutputKept = Metrics.collector(
  "process output",
  Effect.suspend(() => Metric.update(ProcessOutputBytes, outputBytesKept()))
)

interface RoleOptions {
  readonly dataPlane?: DataPlaneOptions
  /** Stop this host's sandboxes once the agent has stopped (`svc dev`); by default they keep running. */
  readonly stopSandboxesOnStop?: boolean
}

const role = <E>(config: Layer.Layer<AgentConfig, E>, options: RoleOptions) => {
  // Built before the agent's services, so released after them.
  const driver = (options.stopSandboxesOnStop === true
    ? StopSandboxesOnStop.pipe(Layer.provideMerge(DriverFromAgent))
    : DriverFromAgent).pipe(Layer.provide(EgressBridgeFromAgent))
  return services(options.dataPlane !== undefined ? { dataPlane: options.dataPlane } : {}).pipe(
    Layer.provideMerge(driver),
    Layer.provideMerge(config)
  )
}

export class AgentRole {
  /** The agent with the given configuration (tests run several in one process). Needs `Nats` and `SecretBox`. */
  static readonly layerWith = (options: AgentOptions & { readonly dataPlane?: DataPlaneOptions } = {}) => {
    const { dataPlane, ...agent } = options
    return role(AgentConfig.layer(agent), dataPlane !== undefined ? { dataPlane } : {})
  }

  /** The whole role configured from the environment (see `Config.ts`), with its NATS connection and keys. */
  static readonly fromEnv = (options: { readonly stopSandboxesOnStop?: boolean } = {}) => {
    const agent = role(AgentConfig.fromEnv, options)
    return Layer.mergeAll(agent, CommandQueueDepth.pipe(Layer.provide(agent)), ProcessOutputKept).pipe(
      Layer.provide(Layer.mergeAll(Nats.layer, SecretBox.layer)),
      // Traces, logs and /metrics of the role (svc-agent), for everything above.
      Layer.provide(Telemetry.layer("svc-agent"))
    )
  }

  /** The role as an operator runs it: its sandboxes outlive it. */
  static readonly layer = AgentRole.fromEnv()
}

export type AgentServices =
  | AgentConfig
  | SandboxDriver
  | DataPlaneEndpoint
  | HostRegistry
  | CommandConsumer
  | ExitWatcher
  | VolumeReaper
  | SandboxObserver
  | TemplatePools
