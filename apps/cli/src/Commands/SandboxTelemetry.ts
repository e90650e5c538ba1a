/**
 * `svc sandbox logs <id> [-f] [--since]` (without a pid: the sandbox's own log; with one,
 * `Processes.ts` prints that process's output) and `svc sandbox metrics <id> [--since]`, a table
 * of its samples (docs/contract.md#sandbox-logs-and-metrics), through the SDK's `sandbox.logs()`
 * and `sandbox.metrics()`.
 *
 *   svc sandbox logs sbx_... -f
 *   svc sandbox metrics sbx_... --since 15m
 */
import type { MetricSample, Svc } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { call, cliErrorOf } from "../Client.ts"

const sandboxId = Argument.String("sandbox-id").pipe(Argument.withDescription("The sandbox's id (sbx_...)"))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))

export const sinceFlag = Flag.String("since").pipe(
  Flag.withDescription(
    "Only what came at or after this: an ISO 8601 time, or a duration back from now (30s, 15m, 2h, 1d)"
  ),
  Flag.optional
)

/** Prints the sandbox's log; with `follow`, its new lines too until interrupted. */
export const printSandboxLog = (svc: Svc, id: string, options: { follow: boolean; since: Option.Option<string> }) =>
  Effect.tryPromise({
    try: async (signal) => {
      const sandbox = await svc.sandboxes.get(id)
      const since = Option.getOrUndefined(options.since)
      if (!options.follow) return void process.stdout.write(await sandbox.logs({ since, signal }))
      for await (const line of sandbox.logs({ follow: true, since, signal })) {
        if (!process.stdout.write(`${line}\n`)) await new Promise((resolve) => process.stdout.once("drain", resolve))
      }
    },
    catch: (e) => cliErrorOf(e, svc.baseUrl)
  })

const mib = (bytes: number) => (bytes / 1024 ** 2).toFixed(1)
const kib = (bytes: number) => (bytes / 1024).toFixed(1)

/** The samples as a table: one row each, oldest first. */
export const metricsTable = (samples: ReadonlyArray<MetricSample>): string => {
  const header = ["TIME", "CPU%", "MEM MiB", "MEM LIMIT", "DISK MiB", "DISK LIMIT", "PIDS", "NET RX KiB", "NET TX KiB"]
  const rows = samples.map((s) => [
    s.ts,
    s.cpu_pct.toFixed(1),
    mib(s.mem_bytes),
    mib(s.mem_limit_bytes),
    mib(s.disk_bytes),
    mib(s.disk_limit_bytes),
    String(s.pids),
    kib(s.net_rx_bytes),
    kib(s.net_tx_bytes)
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  return [header, ...rows].map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n")
}

export const metrics = Command.make(
  "metrics",
  { sandboxId, since: sinceFlag, json },
  Effect.fn(function*(o) {
    const since = Option.getOrUndefined(o.since)
    const samples = yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).metrics({ since }))
    if (o.json) return yield* Console.log(JSON.stringify({ samples }, null, 2))
    if (samples.length === 0) return yield* Console.log("no samples (a sample is taken every 5 s while it runs)")
    yield* Console.log(metricsTable(samples))
  })
).pipe(Command.withDescription("A sandbox's samples (every 5 s while it runs, kept 24 h) as a table"))
