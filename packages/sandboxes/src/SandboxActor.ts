/**
 * The sandbox actor: one state machine per sandbox, single writer through its mailbox
 * (`actor.sandbox.<partition>.<sandboxId>`, 16 partitions), state in the `sandboxes` row.
 *
 * States: pending → starting → running ⇄ (stopping → stopped → starting) … → deleting → deleted,
 * and error from anywhere a host fails, disappears or does not answer in time.
 *
 *   message      | pending        | starting      | running       | stopping      | stopped       | deleting      | deleted | error
 *   Create       | starting¹/error| ·             | ·             | ·             | ·             | ·             | ·       | ·
 *   Start        | ✗              | ✗             | ✗             | ✗             | starting      | ✗             | ✗       | starting⁷
 *   Stop / Expire| ✗              | ✗             | stopping      | ✗             | ✗             | ✗             | ✗       | ✗
 *   Delete       | deleted²       | deleting³     | deleting³     | deleting³     | deleting³     | ·             | ·       | deleting³
 *   report run   | ·              | running⁴      | (refresh)     | ·             | ·             | ·             | destroy⁵| running⁴
 *   report stop  | ·              | ·             | stopped⁶      | stopped⁶      | ·             | ·             | destroy⁵| stopped
 *   report gone  | ·              | error         | error         | error         | error         | deleted       | ·       | ·
 *   report fail  | ·              | error         | ·             | error         | ·             | error         | ·       | ·
 *   report exit  | ·              | error⁸        | error⁸        | error⁸        | ·             | ·             | destroy⁵| (reason)⁸
 *   HostDown     | error          | error         | error         | error         | error         | deleted       | ·       | ·
 *   Timeout      | error          | error         | ·             | error         | ·             | error         | ·       | ·
 *   Idle         | ·              | ·             | stopping⁹     | ·             | ·             | ·             | ·       | ·
 *   AutoDelete   | ·              | ·             | ·             | ·             | deleting³     | ·             | ·       | ·
 *   SetTimeout   | (fields)       | (fields)      | (fields)      | (fields)      | (fields)      | ·             | ·       | (fields)
 *   activity     | ·              | ·             | (fields)      | ·             | ·             | ·             | ·       | ·
 *
 *   · nothing changes; ✗ refused (the API answers 409 `conflict`, see `commandRefusal`).
 *   ¹ publishes `agent.<hostId>.create`; error when the API found no host (`unplaceable`).
 *   ² nothing was sent to a host yet. ³ publishes `agent.<hostId>.destroy`; with the host down
 *     (or never placed) goes straight to deleted. ⁴ the first time: `sandbox.created` (with the
 *     host's `via`) before `sandbox.state_updated`. ⁵ a host still running a deleted sandbox
 *     (it was down when the sandbox was deleted) is told again to destroy it. ⁶ an `ephemeral`
 *     sandbox is deleted once it stops. ⁷ only one placed on a host: the host starts it again
 *     from its file system (a sandbox whose init died comes back this way). ⁸ the sandbox's init
 *     died (out of memory, killed): `errorMessage` is the host's reason (`out of memory at
 *     ram_mb 256`); in error already (e.g. its host was down meanwhile) only the reason changes.
 *   ⁹ as Expire: only what the supervisor saw (`timeoutFrom`, `lastActivityAt`), and with
 *     `on_timeout: delete` deleting³ instead of stopping.
 *
 * `stopReason` (`Sandboxes/Lifecycle.ts`, the record's `stop_reason` and the events' `reason`) is
 * set where a run ends: `user` (Stop, Delete), `usage_limit` (the meter's Stop), `timeout`
 * (Expire), `idle` (Idle), `oom` (an exit report of an init the OOM killer ended), `host_lost`
 * (HostDown), `error` (any other failure or exit); a new run clears it.
 *
 * SetNetwork and BindSecret (from the API, any state but deleting and deleted) change the
 * egress settings and put the sandbox's `egress` KV entry; the deletion deletes it.
 *
 * Reports: only from the sandbox's own host, and never older than the newest one applied
 * (`at`, host time): a stale or repeated report changes nothing. The host is the one the
 * mailbox subject names (`actor.sandbox.<p>.<id>.host.<hostId>`, which only that host's NATS
 * user may publish), never the report's own `hostId`: a report on a subject naming no host is
 * ignored too. Each state change emits one
 * `sandbox.state_updated`; the deletion emits `sandbox.deleted`.
 *
 * `error` keeps the record as the host last said, with `errorMessage`. A later report from the
 * host (it came back after HostDown, or answered after a Timeout) brings it back to what it says.
 */
import * as Actor from "@svc/actors/Actor"
import type { SandboxCreatedData, SandboxDeletedData, SandboxStateUpdatedData } from "@svc/domain/Events"
import type { StopReason } from "@svc/domain/Lifecycle"
import type { SandboxState } from "@svc/domain/Sandbox"
import {
  type AgentCommand,
  type AgentReport,
  agentSubject,
  SANDBOX_ACTOR_PARTITIONS,
  SANDBOX_ACTOR_TYPE
} from "@svc/host-protocol/Protocol"
import { deleteEgress, putEgress } from "./Sandboxes/Egress.ts"
import { type Delete, SandboxActorState, SandboxMessage } from "./Sandboxes/Model.ts"
import { store } from "./Sandboxes/Store.ts"

export { SandboxActorState, SandboxMessage } from "./Sandboxes/Model.ts"

type State = SandboxActorState
type Message = SandboxMessage
type Ctx = Actor.TransitionContext

// ---------------------------------------------------------------------------------------------
// Effects

const command = (s: State, cmd: AgentCommand): Actor.ActorEffect =>
  Actor.publish(agentSubject(s.hostId!, cmd._tag), cmd)

const stateUpdated = (s: State): Actor.ActorEffect =>
  Actor.emit({
    event: "sandbox.state_updated",
    orgId: s.orgId,
    data: {
      sandbox_id: s.id,
      state: s.state,
      internal_ip: s.internalIp,
      reason: s.stopReason
    } satisfies typeof SandboxStateUpdatedData.Encoded
  })

const created = (s: State, via: "cold-boot" | "restore"): Actor.ActorEffect =>
  Actor.emit({
    event: "sandbox.created",
    orgId: s.orgId,
    data: {
      sandbox_id: s.id,
      host_id: s.hostId!,
      template: s.templateId,
      cpu: s.cpu,
      ram_mb: s.ramMb,
      disk_gb: s.diskGb,
      via
    } satisfies typeof SandboxCreatedData.Encoded
  })

const deleted = (s: State): Actor.ActorEffect =>
  Actor.emit({
    event: "sandbox.deleted",
    orgId: s.orgId,
    data: { sandbox_id: s.id, host_id: s.hostId } satisfies typeof SandboxDeletedData.Encoded
  })

/** A state change: the new state plus its `sandbox.state_updated` (and whatever else). */
const moveTo = (
  s: State,
  state: SandboxState,
  ctx: Ctx,
  patch: Partial<State> = {},
  before: ReadonlyArray<Actor.ActorEffect> = [],
  after: ReadonlyArray<Actor.ActorEffect> = []
): Actor.Transition<State> => {
  const next: State = { ...s, ...patch, state, stateSince: ctx.now }
  return Actor.next(next, ...before, stateUpdated(next), ...after)
}

const unchanged = (s: State | undefined): Actor.Transition<State> => ({ state: s, effects: [] })

/**
 * The loop devices of the sandbox's volumes as its host reported them (`running`); none once it
 * no longer runs (the devices go with its processes). Nothing when it has no volumes.
 */
const withDevices = (s: State, devices: Readonly<Record<string, string>>): Partial<State> =>
  s.volumeAttachments.length === 0 ? {} : {
    volumeAttachments: s.volumeAttachments.map((a) => ({ ...a, device_path: devices[a.volume_id] ?? null }))
  }

// ---------------------------------------------------------------------------------------------
// Commands the API may refuse

export type CommandTag = "Start" | "Stop" | "Expire"

/** Why the state does not allow a user command (409 `conflict`), or null when it does. */
export const commandRefusal = (s: State, tag: CommandTag): string | null => {
  switch (tag) {
    case "Start":
      if (s.state === "stopped" || (s.state === "error" && s.hostId !== null)) return null
      return s.state === "error"
        ? "a sandbox that was never placed on a host cannot be started"
        : `a ${s.state} sandbox cannot be started (only a stopped one or one in error)`
    case "Stop":
    case "Expire":
      return s.state === "running" ? null : `a ${s.state} sandbox cannot be stopped (only a running one)`
  }
}

// ---------------------------------------------------------------------------------------------
// Delete

const deleteNow = (s: State, ctx: Ctx, effects: ReadonlyArray<Actor.ActorEffect>): Actor.Transition<State> =>
  moveTo(s, "deleted", ctx, { deletedAt: ctx.now, agentReady: false }, effects, [deleted({ ...s }), deleteEgress(s)])

const destroy = (s: State): AgentCommand => ({ _tag: "destroy", sandboxId: s.id, orgId: s.orgId })

const onDelete = (
  s0: State,
  m: Pick<typeof Delete.Type, "hostLive" | "children">,
  ctx: Ctx,
  reason: StopReason = "user"
): Actor.Transition<State> => {
  if (s0.state === "deleting" || s0.state === "deleted") return unchanged(s0)
  // A running sandbox deleted stops for `reason`; a stopped one keeps why it stopped.
  const s: State = s0.state === "stopped" || s0.state === "error" ? s0 : { ...s0, stopReason: reason }
  const children = m.children.map((c) =>
    Actor.send(SandboxActor, c.id, { _tag: "Delete", hostLive: c.hostLive, children: [] })
  )
  // Nothing reached a host yet (pending: the create command goes out with Create; never placed).
  if (s.hostId === null || s.state === "pending") return deleteNow(s, ctx, children)
  // The command is durable: a host that comes back destroys it then.
  const cmd = command(s, destroy(s))
  if (!m.hostLive) return deleteNow(s, ctx, [cmd, ...children])
  return moveTo(s, "deleting", ctx, { errorMessage: null }, [cmd, ...children])
}

// ---------------------------------------------------------------------------------------------
// Stops for a reason

const stopFor = (s: State, ctx: Ctx, reason: StopReason): Actor.Transition<State> =>
  moveTo(s, "stopping", ctx, { stopReason: reason }, [command(s, { _tag: "stop", sandboxId: s.id, orgId: s.orgId })])

/** `timeout_s` or `idle_timeout_s` ran out: what `on_timeout` says (stop, or delete with its children). */
const lapse = (
  s: State,
  ctx: Ctx,
  reason: "timeout" | "idle",
  children: typeof Delete.Type["children"]
): Actor.Transition<State> =>
  s.onTimeout === "delete" ? onDelete(s, { hostLive: true, children }, ctx, reason) : stopFor(s, ctx, reason)

// ---------------------------------------------------------------------------------------------
// Reports

/** The host that sent a report: the one its subject names (see the module's comment). */
export const reportingHost = (ctx: Ctx): string | undefined => ctx.sender?.kind === "host" ? ctx.sender.id : undefined

const onReport = (s: State, r: AgentReport, ctx: Ctx): Actor.Transition<State> => {
  if (s.hostId === null || reportingHost(ctx) !== s.hostId) return unchanged(s)
  if (s.lastReportAt !== null && r.at < s.lastReportAt) return unchanged(s)
  const seen: Partial<State> = { lastReportAt: r.at }
  const ip: Partial<State> = r.internalIp !== undefined ? { internalIp: r.internalIp } : {}

  if (s.state === "deleted") {
    // The host still has it (it was down when the sandbox was deleted): destroy it again.
    return r.status === "running" || r.status === "stopped" || r.status === "exited"
      ? { state: { ...s, ...seen }, effects: [command(s, destroy(s))] }
      : unchanged(s)
  }

  switch (r.status) {
    case "running": {
      if (s.state !== "starting" && s.state !== "error" && s.state !== "running") return unchanged(s)
      const patch: Partial<State> = {
        ...seen,
        ...ip,
        agentReady: r.agentReady ?? true,
        ...(r.runtimeReady !== undefined ? { runtimeReady: r.runtimeReady } : {}),
        ...(r.runtimeReason !== undefined ? { runtimeReason: r.runtimeReason } : {}),
        errorMessage: null,
        createdEmitted: true,
        ...withDevices(s, r.volumeDevices ?? {})
      }
      if (s.state === "running") {
        // A repeat (e.g. the agent's reconcile after a restart): refresh the fields, no event.
        return Actor.next({ ...s, ...patch })
      }
      const first = s.createdEmitted ? [] : [created({ ...s, ...patch } as State, r.via ?? "cold-boot")]
      // A new run: its lifetime and idle clock start now.
      return moveTo(s, "running", ctx, {
        ...patch,
        startedAt: ctx.now,
        stoppedAt: null,
        stopReason: null,
        timeoutFrom: ctx.now,
        lastActivityAt: ctx.now,
        busy: false
      }, first)
    }
    case "stopped": {
      if (s.state !== "running" && s.state !== "stopping" && s.state !== "error") return unchanged(s)
      const stopped = moveTo(s, "stopped", ctx, {
        ...seen,
        ...ip,
        agentReady: false,
        stoppedAt: ctx.now,
        errorMessage: null,
        // Asked to stop: why it was asked; in error: why it failed; running: nobody asked.
        stopReason: s.state === "running" ? "error" : s.stopReason ?? (s.state === "stopping" ? "user" : "error"),
        busy: false,
        ...withDevices(s, {})
      })
      if (s.type === "ephemeral") {
        // Removed once it stops: destroy it right away.
        const next = stopped.state!
        const deleting = moveTo(next, "deleting", ctx, {}, [command(next, destroy(next))])
        return { state: deleting.state, effects: [...stopped.effects, ...deleting.effects] }
      }
      return stopped
    }
    case "destroyed": {
      if (s.state === "deleting") return deleteNow({ ...s, ...seen }, ctx, [])
      if (s.state === "error" || s.state === "pending") return unchanged(s)
      return moveTo(s, "error", ctx, {
        ...seen,
        agentReady: false,
        stopReason: "error",
        errorMessage: `the sandbox no longer exists on host ${s.hostId}`
      })
    }
    case "exited": {
      // The host's truth: nothing runs. A stop in progress then reports `stopped`; a start
      // before this report was answered earlier (reports are ordered by `at`).
      if (s.state === "error") {
        return Actor.next({
          ...s,
          ...seen,
          errorMessage: r.errorMessage ?? s.errorMessage,
          ...(r.outOfMemory === true ? { stopReason: "oom" as const } : {})
        })
      }
      if (s.state !== "running" && s.state !== "starting" && s.state !== "stopping") return unchanged(s)
      return moveTo(s, "error", ctx, {
        ...seen,
        ...ip,
        agentReady: false,
        busy: false,
        stopReason: r.outOfMemory === true ? "oom" : "error",
        errorMessage: r.errorMessage ?? "the sandbox's init ended",
        ...withDevices(s, {})
      })
    }
    case "failed": {
      if (s.state !== "starting" && s.state !== "stopping" && s.state !== "deleting") return unchanged(s)
      const what = s.state === "starting" ? "start" : s.state === "stopping" ? "stop" : "delete"
      return moveTo(s, "error", ctx, {
        ...seen,
        agentReady: false,
        stopReason: "error",
        errorMessage: `host ${s.hostId} could not ${what} the sandbox: ${r.errorMessage ?? "no reason given"}`
      })
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The transition

export const transition = (s: State | undefined, m: Message, ctx: Ctx): Actor.Transition<State> => {
  // Every message but the API's insert needs the row; a message for a sandbox that does not
  // exist (never inserted, a transaction rolled back) changes nothing.
  if (s === undefined) return Actor.none()
  switch (m._tag) {
    case "Create": {
      if (s.state !== "pending") return unchanged(s)
      if (s.hostId === null) {
        return moveTo(s, "error", ctx, {
          stopReason: "error",
          errorMessage: m.unplaceable ?? "no host could take the sandbox"
        })
      }
      const cmd: AgentCommand = {
        _tag: "create",
        sandboxId: s.id,
        orgId: s.orgId,
        resources: {
          template: s.templateName,
          sealedEnv: m.sealedEnv,
          cpu: s.cpu,
          ramMb: s.ramMb,
          diskGb: s.diskGb,
          exposedPorts: s.exposedPorts,
          ...(m.image !== undefined ? { image: m.image } : {}),
          ...(m.volumes !== undefined && m.volumes.length > 0 ? { volumes: m.volumes } : {}),
          // Which warm pool may serve it (docs/architecture.md#warm-pools).
          ...(m.image !== undefined ? { templateId: s.templateId } : {}),
          ...(m.forkOf !== undefined ? { forkOf: m.forkOf } : {})
        }
      }
      return moveTo(s, "starting", ctx, {}, [command(s, cmd)])
    }
    case "Start":
      if (commandRefusal(s, "Start") !== null) return unchanged(s)
      return moveTo(s, "starting", ctx, { errorMessage: null }, [
        command(s, { _tag: "start", sandboxId: s.id, orgId: s.orgId })
      ])
    case "Stop":
      if (commandRefusal(s, "Stop") !== null) return unchanged(s)
      return stopFor(s, ctx, m.reason ?? "user")
    case "Expire":
      // Only the lifetime the supervisor saw: a keep-alive since then changes nothing.
      if (commandRefusal(s, "Expire") !== null || s.timeoutS === null || s.timeoutFrom !== m.startedAt) {
        return unchanged(s)
      }
      return lapse(s, ctx, "timeout", m.children ?? [])
    case "Idle":
      // Only the idleness the supervisor saw: activity reported since then changes nothing.
      if (s.state !== "running" || s.idleTimeoutS === null || s.busy || s.lastActivityAt !== m.lastActivityAt) {
        return unchanged(s)
      }
      return lapse(s, ctx, "idle", m.children)
    case "AutoDelete":
      if (s.state !== "stopped" || s.autoDeleteS === null || s.stoppedAt !== m.stoppedAt) return unchanged(s)
      return onDelete(s, { hostLive: true, children: m.children }, ctx)
    case "SetTimeout": {
      // The API refuses these first (409); a late copy changes nothing.
      if (s.state === "deleting" || s.state === "deleted") return unchanged(s)
      const running = s.state === "running"
      const patch: Partial<State> = {}
      if (m.timeoutS !== undefined) {
        Object.assign(patch, { timeoutS: m.timeoutS, timeoutFrom: running ? ctx.now : s.timeoutFrom })
      }
      if (m.idleTimeoutS !== undefined) {
        Object.assign(patch, {
          idleTimeoutS: m.idleTimeoutS,
          lastActivityAt: running ? Math.max(s.lastActivityAt ?? 0, ctx.now) : s.lastActivityAt
        })
      }
      return Actor.next({ ...s, ...patch })
    }
    case "ActivityReport": {
      if (s.hostId === null || reportingHost(ctx) !== s.hostId || s.state !== "running") return unchanged(s)
      // In the runtime's clock: a report applied late makes the activity later, never earlier.
      const at = Math.max(s.lastActivityAt ?? 0, ctx.now - m.idleMs)
      if (at === s.lastActivityAt && m.busy === s.busy) return unchanged(s)
      return Actor.next({ ...s, lastActivityAt: at, busy: m.busy })
    }
    case "Delete":
      return onDelete(s, m, ctx)
    case "SetNetwork": {
      // The API refuses these first (409); a late copy changes nothing.
      if (s.state === "deleting" || s.state === "deleted") return unchanged(s)
      const next: State = { ...s, network: m.network }
      return Actor.next(next, putEgress(next))
    }
    case "BindSecret": {
      if (s.state === "deleting" || s.state === "deleted" || s.secretIds.includes(m.secretId)) return unchanged(s)
      const next: State = { ...s, secretIds: [...s.secretIds, m.secretId] }
      return Actor.next(next, putEgress(next))
    }
    case "AgentReport":
      return onReport(s, m, ctx)
    case "HostDown": {
      if (s.hostId !== m.hostId) return unchanged(s)
      if (s.state === "deleting") return deleteNow(s, ctx, [])
      if (s.state === "deleted" || s.state === "error") return unchanged(s)
      const since = m.lastSeenAt === null
        ? "its record is gone"
        : `last heartbeat ${new Date(m.lastSeenAt).toISOString()}`
      return moveTo(s, "error", ctx, {
        agentReady: false,
        busy: false,
        stopReason: "host_lost",
        errorMessage: `host ${m.hostId} is down (${since})`
      })
    }
    case "Timeout": {
      // Only the wait the sweeper saw: a sandbox that moved on since changes nothing.
      if (s.state !== m.state || s.stateSince !== m.since) return unchanged(s)
      if (s.state !== "pending" && s.state !== "starting" && s.state !== "stopping" && s.state !== "deleting") {
        return unchanged(s)
      }
      const verb = s.state === "deleting" ? "delete" : s.state === "stopping" ? "stop" : "start"
      return moveTo(s, "error", ctx, {
        agentReady: false,
        stopReason: "error",
        errorMessage: `the sandbox did not ${verb} within ${Math.round(m.afterMs / 1000)} s`
      })
    }
  }
}

export const SandboxActor: Actor.Actor<typeof SandboxActorState, typeof SandboxMessage> = Actor.make({
  type: SANDBOX_ACTOR_TYPE,
  partitions: SANDBOX_ACTOR_PARTITIONS,
  state: SandboxActorState,
  message: SandboxMessage,
  store,
  transition
})
