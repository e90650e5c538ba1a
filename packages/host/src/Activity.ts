/**
 * What a host sees of its sandboxes' activity (docs/contract.md#lifecycle-timeouts-idleness-resume),
 * kept by the agent for idleness: every data-plane call on a sandbox (exec, files, processes,
 * contexts, terminal, a preview's tunnel; not its stats) is activity, and the sandbox is `busy`
 * while one is in progress (a running exec, a transfer, an open terminal or tunnel) or while a
 * background process started through the API runs (a code context's interpreter excepted: only
 * its runs count, which are execs). Times are on the monotonic clock (`performance.now()`), so a
 * jump of the wall clock changes nothing.
 *
 * `report` is the pure decision of what to tell the control plane: a change of `busy`, or
 * activity since the last report; nothing otherwise.
 */
import { Context, Layer } from "effect"

export interface ActivityEntry {
  /** Monotonic ms of the last activity (a call's start or end); null: none seen by this agent. */
  lastMs: number | null
  /** Calls in progress. */
  inFlight: number
  /** Background processes that do not keep it awake (code contexts' interpreters), by pid. */
  readonly quiet: Set<number>
  /** What the last report said. */
  reportedBusy: boolean
  reportedLastMs: number | null
}

export interface ActivityReportDue {
  readonly busy: boolean
  readonly idleMs: number
}

/**
 * What to report for `entry` at monotonic `now`, given whether a background process keeps the
 * sandbox awake; undefined when nothing changed since the last report.
 */
export const report = (entry: ActivityEntry, processesAwake: boolean, now: number): ActivityReportDue | undefined => {
  const busy = entry.inFlight > 0 || processesAwake
  const idleMs = busy || entry.lastMs === null ? 0 : Math.max(0, now - entry.lastMs)
  if (busy !== entry.reportedBusy) return { busy, idleMs }
  if (!busy && entry.lastMs !== null && entry.lastMs !== entry.reportedLastMs) return { busy, idleMs }
  return undefined
}

const empty = (): ActivityEntry => ({
  lastMs: null,
  inFlight: 0,
  quiet: new Set(),
  reportedBusy: false,
  reportedLastMs: null
})

export class SandboxActivity extends Context.Service<SandboxActivity, {
  /** A call on the sandbox began; the returned function (idempotent) ends it. */
  readonly begin: (sandboxId: string) => () => void
  /** A background process that does not keep the sandbox awake. */
  readonly quiet: (sandboxId: string, pid: number) => void
  /** The sandboxes seen, for the reporter. */
  readonly ids: () => ReadonlyArray<string>
  /** The report due now for one of them (recorded as sent), given its awake processes. */
  readonly due: (sandboxId: string, awake: (quiet: ReadonlySet<number>) => boolean) => ActivityReportDue | undefined
  /**
   * A sandbox found running when the agent starts: what its actor last heard is unknown (a
   * background process that kept it busy ended with the previous agent), so its next check
   * reports it, as if activity had ended now (never earlier).
   */
  readonly found: (sandboxId: string) => void
  /** Forgets a sandbox that no longer runs here (its processes ended with it). */
  readonly forget: (sandboxId: string) => void
}>()("@svc/host/Activity") {
  static readonly make = (now: () => number = () => performance.now()) => {
    const entries = new Map<string, ActivityEntry>()
    const entry = (id: string) => {
      let e = entries.get(id)
      if (e === undefined) {
        e = empty()
        entries.set(id, e)
      }
      return e
    }
    return SandboxActivity.of({
      begin: (sandboxId) => {
        const e = entry(sandboxId)
        e.inFlight++
        e.lastMs = now()
        let ended = false
        return () => {
          if (ended) return
          ended = true
          const current = entries.get(sandboxId)
          if (current !== e) return
          e.inFlight--
          e.lastMs = now()
        }
      },
      quiet: (sandboxId, pid) => {
        entry(sandboxId).quiet.add(pid)
      },
      ids: () => [...entries.keys()],
      found: (sandboxId) => {
        const e = entry(sandboxId)
        e.lastMs ??= now()
        e.reportedBusy = true
      },
      due: (sandboxId, awake) => {
        const e = entries.get(sandboxId)
        if (e === undefined) return undefined
        const t = now()
        const due = report(e, awake(e.quiet), t)
        if (due !== undefined) {
          e.reportedBusy = due.busy
          e.reportedLastMs = e.lastMs
        }
        return due
      },
      forget: (sandboxId) => {
        const e = entries.get(sandboxId)
        // A call still in progress keeps it (it ends soon; the next check forgets it then).
        if (e !== undefined && e.inFlight === 0) entries.delete(sandboxId)
      }
    })
  }

  static readonly layer = Layer.sync(SandboxActivity, () => SandboxActivity.make())
}
