/**
 * How the agent applies one command to one of its sandboxes, as a pure decision:
 * `(state, command, observation) → actions`, tested against a written-out table without
 * sandboxes (`test/LocalSandboxes/Decision.test.ts`). The I/O is the runner's
 * (`LocalSandboxes.ts`): it performs the actions in order; the last one either answers (a report
 * or a refusal, which ends the command) or observes (a driver step, whose outcome is the next
 * observation it decides on).
 *
 * The state is the sandbox's journal entry as the command found it (`Journal.ts`): none, settled
 * (`pending: null`) or with an unfinished operation. Every command is idempotent:
 *
 *   command | observation          | state    | actions
 *   create  | received             | any      | prepare (env, image, spec)
 *   create  | not prepared         | any      | fail (why)
 *   create  | prepared             | settled  | list (a repeat: say how it is)
 *   create  | prepared             | other    | mark create, adopt (a warm pool entry)
 *   create  | listed, absent       | (repeat) | mark create, adopt
 *   create  | adopted (booted)     | any      | mark settled, report running (restore, ready, runtime)
 *   create  | adopted (unbooted)   | any      | boot, mark settled, report running (restore, ready, runtime)
 *   create  | not adopted          | any      | create
 *   create  | created              | any      | boot, mark settled, report running (cold-boot, ready)
 *   create  | refused: exists      | any      | mark settled, list (on disk without a settled entry)
 *   create  | listed, absent       | (exists) | forget, fail by the refusal
 *   create  | listed, stopped      | any      | report stopped
 *   create  | listed, running      | any      | probe, report running (cold-boot)
 *   create  | refused: other       | any      | forget, fail by it (the driver removed what it made)
 *   start   | received             | none     | fail (no such sandbox)
 *   start   | received             | other    | mark start, start
 *   start   | started              | any      | boot, mark settled, report running (restore, ready)
 *   start   | refused: not found   | any      | forget, fail by it
 *   start   | refused: other       | any      | stop (quietly: stopped, not half started), mark settled, fail by it
 *   stop    | received             | none     | fail (no such sandbox)
 *   stop    | received             | other    | mark stop, stop
 *   stop    | stopped              | any      | mark settled, report stopped
 *   stop    | refused: not found   | any      | forget, fail by it
 *   stop    | refused: other       | any      | mark settled, fail by it
 *   destroy | received             | any      | mark destroy, destroy
 *   destroy | destroyed            | any      | forget, forget the runtime, report destroyed
 *   destroy | refused              | any      | fail by it (the entry keeps `pending: destroy`)
 *   build   | received             | any      | fail (builds are `TemplateImages`')
 *
 * A mark is written before each driver step that changes the disk, and settled after it: a crash
 * in between leaves `pending`, which reconcile undoes (`Reconcile.ts`).
 *
 * `agent_ready` ("ready" above) of a run the driver has just started is its init's ready byte:
 * the driver's create and start answer only once the sandbox's init, in its namespaces, root,
 * cgroups and network, has written it (`native/svc-init.c`), which is everything an exec enters.
 * An exec of `true` proved no more (7–9 ms of CPU per create: bench/README.md, tti), so only a
 * sandbox found running (a repeated create, reconcile) is probed.
 */
import type { AgentCommand } from "@svc/host-protocol/Protocol"
import type { SandboxDriverError, SandboxInfo } from "@svc/host/Driver"
import type { PendingOp } from "../Journal.ts"

/** The sandbox's journal entry when its command began. */
export type EntryState = "none" | "settled" | "pending"

export interface SandboxState {
  readonly entry: EntryState
}

/** The driver steps that observe: their outcome is the next observation. */
export type DriverStep = "create" | "start" | "stop" | "destroy"

/** What `List` found of the sandbox on disk. */
export type Listing =
  | { readonly _tag: "Absent" }
  | { readonly _tag: "Stopped" }
  | { readonly _tag: "Running"; readonly internalIp: string }

/** Why the sandbox was listed: a repeat of a settled create, or a create the driver said exists. */
export type ListReason =
  | { readonly _tag: "Repeat" }
  | { readonly _tag: "Exists"; readonly error: SandboxDriverError }

export type Observation =
  | { readonly _tag: "Received" }
  | { readonly _tag: "Prepared" }
  | { readonly _tag: "NotPrepared"; readonly message: string }
  | { readonly _tag: "Listed"; readonly reason: ListReason; readonly listing: Listing }
  /**
   * A warm pool entry became the sandbox. `booted`: a template pool's entry, whose `start_cmd`
   * ran and `ready_cmd` passed when it was made; otherwise (a `base` entry) the template's boot
   * is still to run (a template without layers takes `base` entries too).
   */
  | { readonly _tag: "Adopted"; readonly internalIp: string; readonly booted: boolean }
  | { readonly _tag: "NotAdopted" }
  /** A create or start brought the sandbox up, with its limits. */
  | { readonly _tag: "Up"; readonly step: "create" | "start"; readonly internalIp: string }
  | { readonly _tag: "Done"; readonly step: "stop" | "destroy" }
  | { readonly _tag: "Refused"; readonly step: DriverStep; readonly error: SandboxDriverError }

export type Action =
  // Observing: the runner decides again on what they found.
  /** create: open the sealed env, prepare a template's image, decode the driver's spec. */
  | { readonly _tag: "Prepare" }
  /** What the driver lists of the sandbox. */
  | { readonly _tag: "List"; readonly reason: ListReason }
  /** Take a warm pool entry for the prepared spec, if one fits (`Pool.ts`). */
  | { readonly _tag: "Adopt" }
  /** A driver step (create and start with the host's limits checked, see `missingLimits`). */
  | { readonly _tag: "Drive"; readonly step: DriverStep }
  // Doing.
  /** Write the journal entry: `pending` before a step, null (settled) after it. */
  | { readonly _tag: "Mark"; readonly pending: PendingOp | null }
  /** Remove the journal entry. */
  | { readonly _tag: "Forget" }
  /** Remove the template's start and ready commands kept for the sandbox (`Runtimes.ts`). */
  | { readonly _tag: "ForgetRuntime" }
  /** Stop, whatever the driver says. */
  | { readonly _tag: "StopQuietly" }
  /** `agent_ready`: whether the sandbox answers an exec (`Readiness.ts`). */
  | { readonly _tag: "Probe" }
  /** A template's boot: its `start_cmd` started, its `ready_cmd` checked (`Readiness.ts`). */
  | { readonly _tag: "Boot" }
  // Answering: the command's report.
  | {
    readonly _tag: "ReportRunning"
    readonly internalIp: string
    readonly via: "cold-boot" | "restore"
    /**
     * `probed`: as the last `Probe` said; `true`: a pool entry, which passed its probe when made,
     * or a run the driver has just started (its init's ready byte).
     */
    readonly agentReady: "probed" | true
    /** With what the `Boot` said of the template's runtime. */
    readonly runtime: boolean
    /** With its volumes' loop devices. */
    readonly volumes: boolean
  }
  | { readonly _tag: "Report"; readonly status: "stopped" | "destroyed" }
  | { readonly _tag: "Fail"; readonly message: string }
  /** Failed by a driver refusal: its details to the host's log, tenant-safe words in the report. */
  | { readonly _tag: "FailBy"; readonly error: SandboxDriverError }

const mark = (pending: PendingOp | null): Action => ({ _tag: "Mark", pending })
const drive = (step: DriverStep): Action => ({ _tag: "Drive", step })
const fail = (message: string): Action => ({ _tag: "Fail", message })
const failBy = (error: SandboxDriverError): Action => ({ _tag: "FailBy", error })
const running = (
  internalIp: string,
  via: "cold-boot" | "restore",
  fields: { readonly agentReady: "probed" | true; readonly runtime: boolean; readonly volumes: boolean }
): Action => ({ _tag: "ReportRunning", internalIp, via, ...fields })

/** The command's next actions; the last one answers or observes. */
export const decide = (
  state: SandboxState,
  command: AgentCommand,
  observation: Observation
): ReadonlyArray<Action> => {
  // A step's outcome answers the command that took it: any other is the runner's mistake.
  if ("step" in observation && observation.step !== command._tag) return unasked(command, observation)
  switch (command._tag) {
    case "create":
      switch (observation._tag) {
        case "Received":
          return [{ _tag: "Prepare" }]
        case "NotPrepared":
          return [fail(observation.message)]
        case "Prepared":
          return state.entry === "settled"
            ? [{ _tag: "List", reason: { _tag: "Repeat" } }]
            : [mark("create"), { _tag: "Adopt" }]
        case "Listed": {
          const { listing, reason } = observation
          switch (listing._tag) {
            case "Stopped":
              return [{ _tag: "Report", status: "stopped" }]
            case "Running":
              return [
                { _tag: "Probe" },
                running(listing.internalIp, "cold-boot", {
                  agentReady: "probed",
                  runtime: false,
                  volumes: true
                })
              ]
            case "Absent":
              return reason._tag === "Repeat"
                ? [mark("create"), { _tag: "Adopt" }]
                : [{ _tag: "Forget" }, failBy(reason.error)]
          }
          break
        }
        case "Adopted":
          return [...(observation.booted ? [] : [{ _tag: "Boot" } as const]), mark(null), {
            _tag: "ReportRunning",
            internalIp: observation.internalIp,
            via: "restore",
            agentReady: true,
            runtime: true,
            volumes: false
          }]
        case "NotAdopted":
          return [drive("create")]
        case "Up":
          return [
            { _tag: "Boot" },
            mark(null),
            running(observation.internalIp, "cold-boot", { agentReady: true, runtime: true, volumes: true })
          ]
        case "Refused":
          return observation.error._tag === "SandboxAlreadyExists"
            ? [mark(null), { _tag: "List", reason: { _tag: "Exists", error: observation.error } }]
            : [{ _tag: "Forget" }, failBy(observation.error)]
      }
      break
    case "start":
      switch (observation._tag) {
        case "Received":
          return state.entry === "none" ? [fail(NO_SUCH_SANDBOX)] : [mark("start"), drive("start")]
        case "Up":
          return [
            { _tag: "Boot" },
            mark(null),
            running(observation.internalIp, "restore", { agentReady: true, runtime: true, volumes: true })
          ]
        case "Refused":
          return observation.error._tag === "SandboxNotFound"
            ? [{ _tag: "Forget" }, failBy(observation.error)]
            : [{ _tag: "StopQuietly" }, mark(null), failBy(observation.error)]
      }
      break
    case "stop":
      switch (observation._tag) {
        case "Received":
          return state.entry === "none" ? [fail(NO_SUCH_SANDBOX)] : [mark("stop"), drive("stop")]
        case "Done":
          return [mark(null), { _tag: "Report", status: "stopped" }]
        case "Refused":
          return observation.error._tag === "SandboxNotFound"
            ? [{ _tag: "Forget" }, failBy(observation.error)]
            : [mark(null), failBy(observation.error)]
      }
      break
    case "destroy":
      switch (observation._tag) {
        case "Received":
          return [mark("destroy"), drive("destroy")]
        case "Done":
          return [{ _tag: "Forget" }, { _tag: "ForgetRuntime" }, { _tag: "Report", status: "destroyed" }]
        case "Refused":
          return [failBy(observation.error)]
      }
      break
    case "build":
      // Builds are run by `TemplateImages` (Commands.ts routes them): never here.
      if (observation._tag === "Received") return [fail("a build is not a sandbox command")]
      break
  }
  return unasked(command, observation)
}

const NO_SUCH_SANDBOX = "no such sandbox on this host"

/** The runner only gives a command the outcomes of the steps decided for it: anything else is a bug. */
const unasked = (command: AgentCommand, observation: Observation): never => {
  throw new Error(`no decision for ${command._tag} after ${observation._tag}`)
}

/**
 * The limits a sandbox came up without (the host's cgroups refused a write the start-up probe
 * made), in words; empty when it has them all or the operator allowed unlimited sandboxes. A
 * sandbox missing one is undone and its command fails: the host's limits hold for each sandbox.
 */
export const missingLimits = (info: Pick<SandboxInfo, "limits">, allowUnlimited: boolean): ReadonlyArray<string> =>
  allowUnlimited ? [] : (["memory", "cpu", "pids"] as const)
    .filter((name) => info.limits[name] !== "applied")
    .map((name) => `${name}: ${info.limits[name]}`)

/**
 * How a report changes the set of sandboxes last reported running (what the exit checks watch):
 * running adds it; any other report removes it, except a failure of a command that did not
 * start it (a refused stop leaves it running).
 */
export const tracking = (
  command: AgentCommand["_tag"] | "reconcile",
  status: "running" | "stopped" | "destroyed" | "failed" | "exited"
): "add" | "remove" | "keep" =>
  status === "running"
    ? "add"
    : status !== "failed" || command === "create" || command === "start"
    ? "remove"
    : "keep"
