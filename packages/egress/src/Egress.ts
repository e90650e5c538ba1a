/**
 * The egress service of a host agent: the sandboxes' one way out (see README.md). It owns
 *
 *   - the platform's CA for this data dir (`Ca.ts`), whose certificate the driver puts into the
 *     `base` template's trust store;
 *   - the mirror of the `egress` KV bucket (`Store.ts`);
 *   - the proxy on a root-only unix socket (`Proxy.ts`);
 *   - the front (`native/svc-egress-front.c`) on `<gateway>:<tcpPort>`, where the firewall
 *     redirects every TCP connection of the bridge's sandboxes, and the resolver on
 *     `<gateway>:<dnsPort>` (UDP 53 redirected).
 *
 * The ports are machine-wide: when another agent on the same bridge holds them already, this one
 * waits and tries again every few seconds (its sandboxes are served by that agent's proxy, which
 * finds every sandbox through the machine-wide leases and the shared KV bucket). That holds only
 * among the agents of one platform: before its driver touches the bridge, the agent records its
 * platform for its bridge (`claimEgressBridge`, `Owner.ts`) and refuses to start beside another
 * platform's agent on that bridge, or on another bridge with its subnet or ports.
 */
import { Nats } from "@svc/bus/Nats"
import { ensureBucket } from "@svc/bus/Topology"
import { SecretBox } from "@svc/crypto/SecretBox"
import type { Subnet } from "@svc/domain/Address"
import { EGRESS_BUCKET_SPEC } from "@svc/host-protocol/Egress"
import * as Native from "@svc/host/Driver/Native"
import { Context, Duration, Effect, Layer, Schema } from "effect"
import { spawn } from "node:child_process"
import type * as Dgram from "node:dgram"
import * as FsSync from "node:fs"
import * as FsPromises from "node:fs/promises"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { type Ca, ensureCa } from "./Ca.ts"
import type { EgressSettings } from "./Config.ts"
import { ResolvedNames, startUdpResolver } from "./Dns.ts"
import { hostsFileReader } from "./HostsFile.ts"
import { claimBridge } from "./Owner.ts"
import { addressRules } from "./Policy.ts"
import { type EgressLog, startProxy } from "./Proxy.ts"
import { EgressStore } from "./Store.ts"

export class EgressFailure extends Schema.TaggedError<EgressFailure>()("EgressFailure", {
  operation: Schema.String,
  message: Schema.String
}) {}

export interface EgressOptions extends EgressSettings {
  /** Root-only folder of this agent's egress state: the CA, the proxy's socket, the front's build. */
  readonly dir: string
  /** The bridge's gateway address: where the front and the resolver listen. */
  readonly gateway: string
  /** Machine-wide leases: a sandbox is identified by its source address. */
  readonly leaseDir: string
  /** Never reachable from a sandbox, whatever the operator allows (the bridge's subnet, the host's addresses). */
  readonly platform: ReadonlyArray<Subnet>
}

/** What an agent with egress claims on its machine. */
export interface BridgeClaim {
  /** Machine-wide folder (the driver's `runDir`) where each bridge's agents are recorded. */
  readonly runDir: string
  readonly bridge: string
  /** The bridge's subnet as configured (`10.213.0.0/16`). */
  readonly subnet: string
  readonly tcpPort: number
  readonly dnsPort: number
  readonly hostId: string
}

const NATIVE_DIR = fileURLToPath(new URL("../native/", import.meta.url))
const RETRY_MS = 2_000
/** How long the front keeps a connection the proxy has not accepted yet (its accept queue full). */
const HANDOFF_SECONDS = 10

/** The CA of a data dir, made on first use; what the driver's `trustedCaPem` takes. */
export const ensureEgressCa = (dir: string): Effect.Effect<Ca, EgressFailure> =>
  Effect.tryPromise({
    try: () => ensureCa(dir),
    catch: (e) => new EgressFailure({ operation: "ca", message: e instanceof Error ? e.message : String(e) })
  })

/**
 * Records this agent's platform (its `egress` bucket, named and dated by the NATS that holds it)
 * for its bridge, for the scope's life; fails, saying why and what to change, beside another
 * platform's live agent on the bridge or another bridge's with the same subnet or ports. Run
 * before the driver installs the bridge's firewall, so that a refused agent changes nothing.
 */
export const claimEgressBridge = Effect.fn("Egress.claimBridge")(function*(claim: BridgeClaim) {
  const fail = (operation: string) => (e: unknown) =>
    new EgressFailure({ operation, message: e instanceof Error ? e.message : String(e) })
  const nats = yield* Nats
  const kv = yield* ensureBucket(EGRESS_BUCKET_SPEC).pipe(Effect.mapError(fail("platform")))
  const bucket = yield* Effect.tryPromise({ try: () => kv.status(), catch: fail("platform") })
  const held = yield* Effect.acquireRelease(
    Effect.try({
      try: () =>
        claimBridge(claim.runDir, {
          platform: `${bucket.streamInfo.config.name}@${bucket.streamInfo.created}`,
          describe: `NATS ${nats.connection.getServer()}, bucket ${bucket.bucket}`,
          bridge: claim.bridge,
          subnet: claim.subnet,
          tcpPort: claim.tcpPort,
          dnsPort: claim.dnsPort,
          hostId: claim.hostId
        }),
      catch: fail("bridge")
    }),
    (c) => Effect.sync(() => c.release())
  )
  if (held.refused !== undefined) {
    return yield* new EgressFailure({ operation: "bridge", message: `egress: ${held.refused}` })
  }
})

/** Whether this agent's front and resolver hold the ports (false: another agent's do, or none yet). */
export class Egress extends Context.Service<Egress, {
  readonly serving: Effect.Effect<{ readonly front: boolean; readonly dns: boolean }>
}>()("@svc/egress/Egress") {
  static readonly make = Effect.fn("Egress.make")(function*(options: EgressOptions) {
    const store = yield* EgressStore
    const box = yield* SecretBox
    const context = yield* Effect.context<never>()
    const log = (entry: EgressLog) => {
      const { level, message, ...fields } = entry
      Effect.runForkWith(context)(
        level === "warning" ? Effect.logWarning(message, fields) : Effect.logInfo(message, fields)
      )
    }
    const fail = (operation: string) => (e: unknown) =>
      new EgressFailure({ operation, message: e instanceof Error ? e.message : String(e) })

    const ca = yield* ensureEgressCa(options.dir)
    const upstreamCas = options.upstreamCaFile === ""
      ? []
      : [
        yield* Effect.try({
          try: () => FsSync.readFileSync(options.upstreamCaFile, "utf8"),
          catch: fail("upstream ca")
        })
      ]
    const hosts = hostsFileReader(options.hostsFile)
    const resolved = new ResolvedNames()
    const socketPath = NodePath.join(options.dir, "proxy.sock")
    const proxy = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () =>
          startProxy({
            socketPath,
            leaseDir: options.leaseDir,
            rules: addressRules(options.allowedSubnets, options.platform),
            defaultAction: options.defaultAction,
            hosts,
            upstreamCas,
            ca,
            policyOf: (sandboxId) => {
              const known = store.sandbox(sandboxId)
              return known !== undefined ? Promise.resolve(known) : Effect.runPromise(store.lookup(sandboxId))
            },
            secretsOf: store.secretsOf,
            resolved,
            idleTimeoutMs: options.idleTimeoutSeconds * 1000,
            open: (sealed, aad) => Effect.runPromise(box.open(sealed, aad)),
            log
          }),
        catch: fail("proxy")
      }),
      (p) => Effect.promise(() => p.close())
    )
    void proxy
    const front = yield* Effect.tryPromise({
      try: () => Native.build(options.dir, "svc-egress-front", NATIVE_DIR),
      catch: fail("front build")
    })
    const state = { front: false, dns: false }
    // The front's refusals past its caps, already rate-limited per source by the front; named by the lease.
    const refusal = (source: string, cap: string, limit: number, refused: number) =>
      FsPromises.readFile(NodePath.join(options.leaseDir, source), "utf8").then(
        (text) => (JSON.parse(text) as { sandboxId?: unknown }).sandboxId,
        () => undefined
      ).catch(() => undefined).then((sandboxId) =>
        Effect.runForkWith(context)(Effect.logWarning("egress: too many connections", {
          sandboxId: typeof sandboxId === "string" ? sandboxId : "unknown",
          source,
          limit: cap === "total" ? `${limit} on the host` : `${limit} per sandbox`,
          refused
        }))
      )

    // The front: started, watched, started again when it ends; waits while another agent holds the port.
    const runFront = Effect.callback<number>((resume) => {
      const child = spawn(front, [
        options.gateway,
        String(options.tcpPort),
        socketPath,
        String(options.maxConnectionsPerSandbox),
        String(options.maxConnections),
        String(options.idleTimeoutSeconds),
        String(HANDOFF_SECONDS)
      ], { stdio: ["pipe", "pipe", "pipe"] })
      let stderr = ""
      let pending = ""
      child.stdout.on("data", (chunk: Buffer) => {
        const lines = (pending + chunk.toString()).split("\n")
        pending = lines.pop()!.slice(-200)
        for (const line of lines) {
          if (line.startsWith("ready")) state.front = true
          // `refused <source> <per-source|total> <cap> <count>`: the front rate-limits these per source.
          const refused = /^refused (\S+) (\S+) (\d+) (\d+)$/.exec(line)
          if (refused !== null) void refusal(refused[1]!, refused[2]!, Number(refused[3]), Number(refused[4]))
        }
      })
      child.stderr.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2000)))
      child.on("error", () => resume(Effect.succeed(-1)))
      child.on("exit", (code) => {
        state.front = false
        if (code !== 98 && stderr !== "") {
          log({ level: "warning", message: "egress: front ended", reason: stderr.trim() })
        }
        resume(Effect.succeed(code ?? -1))
      })
      return Effect.sync(() => {
        state.front = false
        child.kill("SIGKILL")
      })
    })
    yield* Effect.forkScoped(
      Effect.forever(Effect.andThen(runFront, Effect.sleep(Duration.millis(RETRY_MS))))
    )

    // The resolver: bound when the port is free, tried again while another agent holds it.
    let dns: Dgram.Socket | undefined
    const bindDns = Effect.promise(() =>
      startUdpResolver(options.gateway, options.dnsPort, hosts, resolved).then(
        (socket) => {
          dns = socket
          state.dns = true
          return true
        },
        () => false
      )
    )
    yield* Effect.forkScoped(
      Effect.gen(function*() {
        while (!(yield* bindDns)) yield* Effect.sleep(Duration.millis(RETRY_MS))
      })
    )
    yield* Effect.addFinalizer(() => Effect.sync(() => dns?.close()))

    // Ready when this agent serves, or after a short wait when another one does.
    yield* Effect.gen(function*() {
      for (let i = 0; i < 50 && !(state.front && state.dns); i++) yield* Effect.sleep(Duration.millis(20))
    })
    return Egress.of({ serving: Effect.sync(() => ({ ...state })) })
  })

  /** Needs `Nats` and `SecretBox`. */
  static readonly layer = (options: EgressOptions) =>
    Layer.effect(Egress, Egress.make(options)).pipe(Layer.provide(EgressStore.layer))
}
