/**
 * A metric sample from the driver's reading of a sandbox (its cgroup, its disk image, its veth's
 * counters): pure, so the CPU percentage's arithmetic is tested without a sandbox.
 */
import type { MetricSample } from "@svc/domain/SandboxTelemetry"
import type { SandboxStats } from "@svc/host/Driver"

/** The CPU time a sandbox had used at a moment (host clock, ms). */
export interface CpuReading {
  readonly cpuNs: number
  readonly atMs: number
}

/**
 * The sample at `nowMs`, and the reading the next one is measured from. `cpu_pct` is the CPU
 * time used since `previous` over the wall time since then, in percent of one core (200: two
 * cores busy); 0 without a previous reading or when the counter went back (a new run).
 */
export const sampleOf = (
  stats: SandboxStats,
  previous: CpuReading | undefined,
  nowMs: number
): { readonly sample: MetricSample; readonly reading: CpuReading | undefined } => {
  const reading = stats.cpuUsageNs === undefined ? undefined : { cpuNs: stats.cpuUsageNs, atMs: nowMs }
  let cpuPct = 0
  if (reading !== undefined && previous !== undefined) {
    const wallNs = (reading.atMs - previous.atMs) * 1_000_000
    const usedNs = reading.cpuNs - previous.cpuNs
    if (wallNs > 0 && usedNs > 0) cpuPct = Math.round((usedNs / wallNs) * 1000) / 10
  }
  return {
    sample: {
      ts: new Date(nowMs).toISOString(),
      cpu_pct: cpuPct,
      mem_bytes: Math.max(0, stats.memoryBytes),
      mem_limit_bytes: stats.memoryLimitBytes ?? 0,
      disk_bytes: stats.diskBytes ?? 0,
      disk_limit_bytes: stats.diskLimitBytes ?? 0,
      pids: Math.max(0, stats.pids),
      net_rx_bytes: stats.netBytesIn ?? 0,
      net_tx_bytes: stats.netBytesOut ?? 0
    },
    reading
  }
}
