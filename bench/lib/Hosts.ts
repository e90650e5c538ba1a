/**
 * What the benchmarks share about hosts: our driver alone, a host's id and data folder, its agent
 * as a child process, and removing everything an agent left behind.
 */
import { removeLeftovers } from "@svc/testing/TestHost"
import { Context, Effect, Layer } from "effect"
import { spawn } from "node:child_process"
import * as Fs from "node:fs/promises"
import { fileURLToPath } from "node:url"
import { SecretBox } from "../../packages/crypto/src/SecretBox.ts"
import { makeHostId } from "../../packages/domain/src/Ids.ts"
import { SandboxDriver, SandboxSpec } from "../../packages/host/src/Driver.ts"
import { BubblewrapDriver } from "../../packages/host/src/Driver/Bubblewrap.ts"
import { CONTROLLERS } from "../../packages/host/src/Driver/Cgroups.ts"
import { DriverConfig } from "../../packages/host/src/Driver/Config.ts"

const AGENT_MAIN = fileURLToPath(new URL("../../apps/agent/src/main.ts", import.meta.url))

/**
 * Our driver alone (bubblewrap), without an agent, for the scope: `config` its settings (a host
 * id and data folder at least); the env it seals with the run's keys.
 */
export const bubblewrapDriver = (config: Parameters<typeof DriverConfig.make>[0]) =>
  Effect.map(
    Layer.build(
      BubblewrapDriver.layer.pipe(
        Layer.provide(Layer.succeed(DriverConfig, DriverConfig.make(config))),
        Layer.provide(SecretBox.layer)
      )
    ),
    (context) => Context.get(context, SandboxDriver)
  )

/** A `base` sandbox as the driver benchmarks make it: 1 CPU, `ramMb` of memory, 1 GB of disk, no env or ports. */
export const baseSandboxSpec = (sandboxId: string, ramMb = 256) =>
  new SandboxSpec({ sandboxId, template: "base", env: {}, cpu: 1, ramMb, diskGb: 1, exposedPorts: [] })

/**
 * Removes what an agent of `hostId` left behind: its sandboxes (through the driver, and what the
 * driver's list misses), its data folder, its cgroups.
 */
export const cleanHost = (hostId: string, dataDir: string) =>
  Effect.gen(function*() {
    yield* Effect.scoped(Effect.gen(function*() {
      const driver = yield* bubblewrapDriver({ dataDir, hostId })
      const rows = yield* driver.list
      yield* Effect.forEach(rows, (row) => Effect.ignore(driver.destroy(row.sandboxId)), { concurrency: 4 })
    })).pipe(Effect.ignore)
    yield* Effect.promise(async () => {
      // What the driver's list missed (a pool entry being made when the agent was killed).
      await removeLeftovers(hostId)
      await Fs.rm(dataDir, { recursive: true, force: true })
      for (const c of CONTROLLERS) await Fs.rmdir(`/sys/fs/cgroup/${c}/svc-sandboxes/${hostId}`).catch(() => undefined)
    })
  })

/** The capacity an agent announces so that the scheduler never turns a benchmark's sandboxes away. */
export const UNBOUNDED_HOST = {
  SVC_HOST_CPU: "100000",
  SVC_HOST_RAM_MB: "100000000",
  SVC_HOST_DISK_GB: "1000000"
} as const

export interface BenchHost {
  readonly hostId: string
  readonly dataDir: string
}

/**
 * A new host: its id and its data folder (`prefix` and random letters), made now; at the end of
 * the scope `cleanup` (by default `cleanHost`: what the agent left behind, the folder, the cgroups).
 */
export const benchHost = (
  prefix = "/tmp/svc-bench-host-",
  cleanup: (hostId: string, dataDir: string) => Effect.Effect<void> = cleanHost
) =>
  Effect.gen(function*() {
    const hostId = makeHostId()
    const dataDir = yield* Effect.acquireRelease(
      Effect.promise(() => Fs.mkdtemp(prefix)),
      (dir) => cleanup(hostId, dir)
    )
    return { hostId, dataDir } satisfies BenchHost
  })

/**
 * What an agent of `host` needs to join the bus at `nats` in `region`. The roles of a bench that
 * run as processes of their own share a bus without a subject prefix; the in-process platform's
 * test bus has one.
 */
export const agentEnv = (
  nats: { readonly url: string; readonly prefix?: string },
  host: BenchHost,
  region = "local"
): Record<string, string> => ({
  NATS_URL: nats.url,
  ...(nats.prefix !== undefined ? { SVC_NATS_PREFIX: nats.prefix } : {}),
  SVC_HOST_ID: host.hostId,
  SVC_REGION: region,
  SVC_AGENT_DATA_DIR: host.dataDir
})

/**
 * The agent (apps/agent) as a child process with this process's environment and `env` on top,
 * started with `nodeArgs` (`--cpu-prof`...), its stderr shown here; ready once it prints
 * `agent_ready`. SIGTERM at the end of the scope: it stops as in production (and writes a CPU
 * profile it was asked for). For an agent that dies with the bench whatever happens, without the
 * bench's environment, use `spawnRole` (`@svc/testing/TestProcess`) with `agentEnv`.
 */
export const startAgent = (env: Record<string, string>, nodeArgs: ReadonlyArray<string> = []) =>
  Effect.acquireRelease(
    Effect.callback<{ pid: number; kill: () => void }>((resume) => {
      const child = spawn(process.execPath, [...nodeArgs, AGENT_MAIN], {
        env: { ...process.env, ...env },
        stdio: ["ignore", "pipe", "inherit"]
      })
      let out = ""
      child.stdout!.on("data", (chunk: Buffer) => {
        out += chunk.toString()
        if (out.includes("agent_ready")) resume(Effect.succeed({ pid: child.pid!, kill: () => child.kill("SIGTERM") }))
      })
      child.on("exit", (code) => resume(Effect.die(new Error(`agent exited (${code}): ${out.slice(-3000)}`))))
    }),
    (agent) => Effect.sync(() => agent.kill())
  )
