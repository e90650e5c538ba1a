/**
 * The agent's data plane: the server of `@svc/host/DataPlaneServer` (exec and files of this host's
 * sandboxes, for the API processes only) on the agent's configured address, and the endpoint
 * and token the host record publishes.
 */
import { SandboxActivity } from "@svc/host/Activity"
import { DataPlaneServer, type DataPlaneSettings } from "@svc/host/DataPlaneServer"
import { Context, Effect, Layer } from "effect"
import { AgentConfig } from "./Config.ts"

/** Overrides for tests: `maxTransfers` and the others default to `AgentConfig`'s. */
export type DataPlaneOptions = Partial<Omit<DataPlaneSettings, "port" | "listenHost" | "activity">>

export class DataPlaneEndpoint extends Context.Service<DataPlaneEndpoint, {
  /** Base URL for other processes, e.g. `http://127.0.0.1:43127`. */
  readonly endpoint: string
  readonly token: string
  readonly port: number
}>()("@svc/agent/DataPlaneEndpoint") {
  static readonly layerWith = (options: DataPlaneOptions = {}) =>
    Layer.unwrap(Effect.gen(function*() {
      const config = yield* AgentConfig
      // The agent's reporter of idleness listens to every call (`ActivityReporter.ts`).
      const activity = yield* Effect.serviceOption(SandboxActivity)
      const server = DataPlaneServer.layer({
        ...(activity._tag === "Some" ? { activity: activity.value } : {}),
        port: config.port,
        listenHost: config.listenHost,
        maxTransfers: options.maxTransfers ?? config.maxTransfers,
        maxTransfersPerOrg: options.maxTransfersPerOrg ?? config.maxTransfersPerOrg,
        transferIdleMs: options.transferIdleMs ?? config.transferIdleMs,
        ...(options.transferWaitMs !== undefined ? { transferWaitMs: options.transferWaitMs } : {}),
        ...(options.maxTunnelsPerSandbox !== undefined ? { maxTunnelsPerSandbox: options.maxTunnelsPerSandbox } : {}),
        ...(options.defaultExecTimeoutMs !== undefined ? { defaultExecTimeoutMs: options.defaultExecTimeoutMs } : {})
      })
      const host = config.advertiseHost.includes(":") ? `[${config.advertiseHost}]` : config.advertiseHost
      return Layer.effect(
        DataPlaneEndpoint,
        Effect.gen(function*() {
          const { port, token } = yield* DataPlaneServer
          return DataPlaneEndpoint.of({ endpoint: `http://${host}:${port}`, token, port })
        })
      ).pipe(Layer.provide(server))
    }))

  static readonly layer = DataPlaneEndpoint.layerWith()
}
