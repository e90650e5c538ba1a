/**
 * Which platform a bridge's egress proxy belongs to. The agents of one platform on a machine
 * share the bridge and one proxy (whichever holds the ports serves them all: it finds every
 * sandbox by its lease and reads the platform's `egress` bucket). An agent of another platform
 * (other NATS, other bucket) on that bridge would have its sandboxes served by a proxy that has
 * none of their policies: so it does not start.
 *
 * Each agent with egress on writes a record `<runDir>/<bridge>/egress-agents/<pid>-<hostId>.json`
 * naming its platform (the `egress` bucket's name and creation time: stable across NATS restarts,
 * different for another NATS or prefix), its subnet and ports, and removes it when it stops. At
 * start, after writing its own, it reads every live record (the process is there, with the start
 * time recorded) of every bridge: another platform's on the same bridge, or another bridge's
 * with the same subnet or ports, is a refusal that says which and what to change. Writing first
 * and reading after means two agents starting together never both pass (at worst both refuse).
 */
import * as FsSync from "node:fs"
import * as NodePath from "node:path"

export interface OwnerRecord {
  /** `<bucket>@<created>`: the platform's identity. */
  readonly platform: string
  /** For people: the NATS server and the bucket. */
  readonly describe: string
  readonly bridge: string
  readonly subnet: string
  readonly tcpPort: number
  readonly dnsPort: number
  readonly hostId: string
  readonly pid: number
  /** The process's start time (/proc/<pid>/stat field 22): a reused pid is not the agent. */
  readonly started: string
}

const AGENTS = "egress-agents"

const startTime = (pid: number): string | undefined => {
  try {
    const stat = FsSync.readFileSync(`/proc/${pid}/stat`, "utf8")
    // The command name (field 2) may hold spaces: count from after its closing parenthesis.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]
  } catch {
    return undefined
  }
}

const alive = (record: OwnerRecord) => startTime(record.pid) === record.started

const readRecords = (runDir: string): ReadonlyArray<{ readonly path: string; readonly record: OwnerRecord }> => {
  const out: Array<{ path: string; record: OwnerRecord }> = []
  const bridges = FsSync.existsSync(runDir) ? FsSync.readdirSync(runDir) : []
  for (const bridge of bridges) {
    const dir = NodePath.join(runDir, bridge, AGENTS)
    if (!FsSync.existsSync(dir)) continue
    for (const name of FsSync.readdirSync(dir)) {
      const path = NodePath.join(dir, name)
      try {
        out.push({ path, record: JSON.parse(FsSync.readFileSync(path, "utf8")) as OwnerRecord })
      } catch {
        // Half written or gone: its writer checks again after writing.
      }
    }
  }
  return out
}

/** Pure: why `mine` may not serve beside `other` (both live), or undefined when it may. */
export const conflict = (mine: OwnerRecord, other: OwnerRecord): string | undefined => {
  const change = "give each platform on a machine its own SVC_SANDBOX_BRIDGE, SVC_SANDBOX_SUBNET, " +
    "SVC_EGRESS_PORT and SVC_EGRESS_DNS_PORT"
  const who = `${other.describe}, agent ${other.hostId}, pid ${other.pid}`
  if (other.bridge === mine.bridge) {
    if (other.platform !== mine.platform) {
      return `the bridge ${mine.bridge} is served by the egress proxy of another platform (${who}): ` +
        `this agent's sandboxes would get that platform's policies, not their own; ${change}`
    }
    if (other.subnet !== mine.subnet || other.tcpPort !== mine.tcpPort || other.dnsPort !== mine.dnsPort) {
      return `the bridge ${mine.bridge} is in use with another subnet or other egress ports ` +
        `(${other.subnet}, ${other.tcpPort}/${other.dnsPort}; ${who}): the agents of a bridge must agree`
    }
    return undefined
  }
  if (other.subnet === mine.subnet) {
    return `the subnet ${mine.subnet} is in use on the bridge ${other.bridge} (${who}); ${change}`
  }
  if (other.tcpPort === mine.tcpPort || other.dnsPort === mine.dnsPort) {
    return `the egress ports ${mine.tcpPort}/${mine.dnsPort} are in use on the bridge ${other.bridge} ` +
      `(${other.tcpPort}/${other.dnsPort}; ${who}); ${change}`
  }
  return undefined
}

export interface Claim {
  /** Why this agent may not serve its bridge; undefined when it holds its record. */
  readonly refused: string | undefined
  readonly release: () => void
}

/**
 * Writes this agent's record, then checks every live record. Stale records (their process is
 * gone) are removed on the way.
 */
export const claimBridge = (
  runDir: string,
  mine: Omit<OwnerRecord, "pid" | "started">
): Claim => {
  const pid = process.pid
  const record: OwnerRecord = { ...mine, pid, started: startTime(pid) ?? "" }
  const dir = NodePath.join(runDir, mine.bridge, AGENTS)
  FsSync.mkdirSync(dir, { recursive: true, mode: 0o755 })
  const path = NodePath.join(dir, `${pid}-${mine.hostId}.json`)
  const temporary = `${path}.${process.hrtime.bigint()}.tmp`
  FsSync.writeFileSync(temporary, JSON.stringify(record), { mode: 0o644 })
  FsSync.renameSync(temporary, path)
  const release = () => FsSync.rmSync(path, { force: true })
  for (const other of readRecords(runDir)) {
    if (other.path === path || other.path.endsWith(".tmp")) continue
    if (!alive(other.record)) {
      FsSync.rmSync(other.path, { force: true })
      continue
    }
    const why = conflict(record, other.record)
    if (why !== undefined) {
      release()
      return { refused: why, release: () => undefined }
    }
  }
  return { refused: undefined, release }
}
