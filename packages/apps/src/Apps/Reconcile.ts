/**
 * The app controller's decisions, pure: `transition(state, message, context) → { state, effects }`.
 * The effects are operations for the executor (`Operations.ts`), published through the outbox
 * with the state change: create a replica, start the app's `cmd` in one, delete one, observe
 * them. Their outcomes come back as messages. Nothing here reads a clock or does I/O.
 *
 * The rules, applied after every message (`reconcile`):
 * 1. A replica whose sandbox is not running (error, stopped, deleted, missing) or whose `cmd`
 *    exited, or whose `cmd` could not be started, has failed: it is deleted at once. A failure
 *    of a replica that was not ready for `STABLE_MS` counts toward the backoff.
 * 2. Replicas of an older revision (`cmd` or `env` changed) that are not ready are deleted at
 *    once; a ready one is deleted only while the ready replicas would still be at least
 *    `replicas` without it. New ones are made one at a time (at most `replicas + 1` replicas at
 *    once): a new replica is ready before an old one goes, and the ready count never drops below
 *    `replicas - 1` (it stays at `replicas` unless a replica fails meanwhile).
 * 3. Replicas of the current revision beyond `replicas` are deleted (not ready ones first, the
 *    newest first); missing ones are created, unless a backoff runs (`retryAt`).
 * 4. Deleting: every replica is deleted; once none is left and no create is in flight, the app
 *    is `deleted`. A replica being deleted is kept until its sandbox is seen deleted; a delete
 *    that did not go through (the sandbox went to `error` instead) is asked again.
 *
 * Backoff: a refused create (the org blocked at its usage limit, a quota), a `cmd` that could not
 * be started and a replica that failed young each add one to `failures`; no replica is created
 * before `retryAt` = now + min(1 s × 2^(failures-1), 15 s). A replica ready for `STABLE_MS`, or
 * a new spec, resets it. A blocked org's app thus waits (`degraded`, `reason` says why) and
 * resumes within 15 s (plus a tick) of the org's unblocking, without a hot loop.
 */
import * as Actor from "@svc/actors/Actor"
import type { AppState } from "@svc/domain/App"
import type { StopReason } from "@svc/domain/Lifecycle"
import type { SandboxState } from "@svc/domain/Sandbox"
import {
  type AppControllerState,
  type AppMessage,
  type AppOperation,
  type ObservedReplica,
  operationSubject,
  type Replica
} from "./Model.ts"

type State = AppControllerState
type Ctx = Actor.TransitionContext

export const BACKOFF_BASE_MS = 1_000
export const BACKOFF_MAX_MS = 15_000
/** A replica ready this long is healthy: the backoff resets, and its later failure does not count toward it. */
export const STABLE_MS = 10_000
/** An observation not answered in this time is asked again. */
export const OBSERVE_TIMEOUT_MS = 30_000

export const backoffMs = (failures: number): number =>
  failures <= 0 ? 0 : Math.min(BACKOFF_BASE_MS * 2 ** Math.min(failures - 1, 16), BACKOFF_MAX_MS)

/** The reason shown while the org's usage limit refuses new replicas. */
export const BLOCKED_REASON =
  "the org is blocked at its hard usage limit: new replicas wait until the limit is raised or a new period starts"

// ---------------------------------------------------------------------------------------------
// What the record shows

export interface AppView {
  readonly state: AppState
  readonly readyReplicas: number
  readonly sandboxIds: ReadonlyArray<string>
  readonly reason: string | null
}

const live = (m: Replica) => m.phase !== "removing"

export const view = (s: State): AppView => {
  const ready = s.members.filter((m) => m.phase === "ready").length
  const sandboxIds = s.members.filter(live).map((m) => m.sandboxId)
  if (s.phase === "deleted") return { state: "deleted", readyReplicas: 0, sandboxIds: [], reason: null }
  if (s.phase === "deleting") {
    return { state: "deleting", readyReplicas: ready, sandboxIds, reason: "its sandboxes are being deleted" }
  }
  const settled = ready === s.replicas && s.creating.length === 0 &&
    s.members.every((m) => m.phase === "ready" && m.revision === s.revision)
  if (settled) return { state: "running", readyReplicas: ready, sandboxIds, reason: null }
  if (s.trouble !== null) return { state: "degraded", readyReplicas: ready, sandboxIds, reason: s.trouble }
  const rolling = s.members.some((m) => live(m) && m.revision !== s.revision)
  return {
    state: "deploying",
    readyReplicas: ready,
    sandboxIds,
    reason: rolling
      ? `rolling out revision ${s.revision}: ${ready} of ${s.replicas} replicas ready`
      : `${ready} of ${s.replicas} replicas ready`
  }
}

// ---------------------------------------------------------------------------------------------
// Building blocks

interface Step {
  state: State
  readonly effects: Array<Actor.ActorEffect>
}

const opId = (step: Step): string => {
  const id = `${step.state.id}.${step.state.nextOp}`
  step.state = { ...step.state, nextOp: step.state.nextOp + 1 }
  return id
}

const ask = (step: Step, op: AppOperation) => {
  step.effects.push(Actor.publish(operationSubject(op), op))
}

const setMember = (step: Step, sandboxId: string, patch: Partial<Replica> | null) => {
  const members = patch === null
    ? step.state.members.filter((m) => m.sandboxId !== sandboxId)
    : step.state.members.map((m) => (m.sandboxId === sandboxId ? { ...m, ...patch } : m))
  step.state = { ...step.state, members }
}

const remove = (step: Step, m: Replica, now: number) => {
  const id = opId(step)
  setMember(step, m.sandboxId, { phase: "removing", since: now, op: id })
  ask(step, { _tag: "RemoveReplica", opId: id, appId: step.state.id, orgId: step.state.orgId, sandboxId: m.sandboxId })
}

const launch = (step: Step, m: Replica, now: number) => {
  const id = opId(step)
  setMember(step, m.sandboxId, { phase: "launching", since: now, op: id })
  ask(step, {
    _tag: "LaunchCmd",
    opId: id,
    appId: step.state.id,
    orgId: step.state.orgId,
    sandboxId: m.sandboxId,
    cmd: step.state.cmd
  })
}

const setBack = (step: Step, now: number, trouble: string, blocked = false) => {
  const failures = step.state.failures + 1
  step.state = { ...step.state, failures, retryAt: now + backoffMs(failures), trouble, blocked }
}

/** A replica failed: deleted (unless its sandbox is gone already), and counted when it died young. */
const fail = (step: Step, m: Replica, now: number, why: string, sandboxGone: boolean) => {
  if (step.state.phase === "active") {
    const young = m.phase !== "ready" || now - m.since < STABLE_MS
    const trouble = `replica ${m.sandboxId} failed: ${why}`
    if (young) setBack(step, now, trouble, step.state.blocked)
    else step.state = { ...step.state, trouble }
  }
  if (sandboxGone) setMember(step, m.sandboxId, null)
  else remove(step, m, now)
}

const NOT_RUNNING: ReadonlySet<SandboxState> = new Set(["stopping", "stopped", "deleting", "deleted", "error"])

/**
 * What a sandbox state means for a replica that is not being removed. Why it was replaced says
 * why its sandbox stopped in the sandbox's own words (`stop_reason`: `oom`, `idle`, `host_lost`...).
 */
const onSandboxState = (
  step: Step,
  m: Replica,
  state: SandboxState | "missing",
  now: number,
  reason: StopReason | null = null
) => {
  const because = reason === null ? "" : ` (${reason})`
  if (state === "missing" || state === "deleted") return fail(step, m, now, `its sandbox was deleted${because}`, true)
  if (NOT_RUNNING.has(state)) return fail(step, m, now, `its sandbox is ${state}${because}`, false)
  if (state === "running" && m.phase === "starting" && step.state.phase === "active") {
    // Old revisions are not started: rule 2 deletes them.
    if (m.revision === step.state.revision) launch(step, m, now)
  }
}

// ---------------------------------------------------------------------------------------------
// Reconcile

export const reconcile = (step: Step, now: number) => {
  const s = step.state
  if (s.phase === "deleted") return
  if (s.phase === "deleting") {
    for (const m of s.members.filter(live)) remove(step, m, now)
    if (step.state.members.length === 0 && step.state.creating.length === 0) {
      step.state = { ...step.state, phase: "deleted" }
    }
    return
  }
  // 2. Older revisions: the not-ready ones at once, ready ones while enough stay ready.
  const old = s.members.filter((m) => live(m) && m.revision !== s.revision)
  for (const m of old.filter((m) => m.phase !== "ready")) remove(step, m, now)
  const currentReady = s.members.filter((m) => m.phase === "ready" && m.revision === s.revision).length
  let oldReady = old.filter((m) => m.phase === "ready")
  while (oldReady.length > 0 && currentReady + oldReady.length > s.replicas) {
    remove(step, oldReady[0]!, now)
    oldReady = oldReady.slice(1)
  }
  // 3. The current revision: surplus deleted (not ready first, newest first), missing ones made.
  const current = step.state.members.filter((m) => live(m) && m.revision === s.revision)
  const inFlight = step.state.creating.filter((c) => c.revision === s.revision).length
  // Creates in flight cannot be called back: one that comes back surplus goes then.
  const surplus = current.length - s.replicas
  if (surplus > 0) {
    // Not ready before ready, then the newest first (members are kept in creation order).
    const order = current.map((m, i) => ({ m, i }))
      .sort((a, b) => Number(a.m.phase === "ready") - Number(b.m.phase === "ready") || b.i - a.i)
      .map((x) => x.m)
    for (const m of order.slice(0, surplus)) remove(step, m, now)
  }
  const missing = s.replicas - (current.length + inFlight)
  if (missing <= 0) return
  if (step.state.retryAt !== null && now < step.state.retryAt) return
  // One beyond `replicas` at most while old ready replicas still serve.
  const present = step.state.members.filter(live).length + step.state.creating.length
  const room = Math.max(0, s.replicas + 1 - present)
  for (let i = 0; i < Math.min(missing, room); i++) {
    const n = step.state.nextOp
    const id = opId(step)
    step.state = { ...step.state, creating: [...step.state.creating, { opId: id, revision: s.revision }] }
    ask(step, {
      _tag: "CreateReplica",
      opId: id,
      appId: s.id,
      orgId: s.orgId,
      revision: s.revision,
      name: `${s.name}-${n}`,
      template: s.template,
      sealedEnv: s.sealedEnv,
      exposedPorts: s.exposedPorts
    })
  }
}

/** Observes the replicas when no observation is in flight (or the last one was lost). */
const observe = (step: Step, now: number) => {
  const s = step.state
  if (s.phase === "deleted") return
  if (s.observing !== null && now - s.observing.since < OBSERVE_TIMEOUT_MS) return
  // Also the replicas whose delete was taken but not seen through.
  const replicas = s.members.filter((m) => live(m) || m.op === null).map((m) => ({
    sandboxId: m.sandboxId,
    pid: live(m) ? m.pid : null
  }))
  if (replicas.length === 0) {
    step.state = { ...s, observing: null }
    return
  }
  const id = opId(step)
  step.state = { ...step.state, observing: { opId: id, since: now } }
  ask(step, { _tag: "Observe", opId: id, appId: s.id, orgId: s.orgId, replicas })
}

// ---------------------------------------------------------------------------------------------
// Messages

const find = (s: State, sandboxId: string) => s.members.find((m) => m.sandboxId === sandboxId)

/**
 * A replica being deleted: gone once its sandbox is deleted; its delete asked again when the
 * sandbox is neither deleted nor being deleted (the delete failed: its host timed out).
 */
const onRemovingState = (step: Step, m: Replica, state: SandboxState | "missing", now: number) => {
  if (state === "missing" || state === "deleted") return setMember(step, m.sandboxId, null)
  if (state !== "deleting" && m.op === null) remove(step, m, now)
}

const applyObserved = (step: Step, r: ObservedReplica, now: number) => {
  const m = find(step.state, r.sandboxId)
  if (m === undefined) return
  if (m.phase === "removing") return onRemovingState(step, m, r.sandbox, now)
  if (r.sandbox !== "running") return onSandboxState(step, m, r.sandbox, now, r.reason ?? null)
  // Only what was checked of the pid it still has: a relaunch since makes the answer stale.
  if (r.process === "exited" && m.phase === "ready" && r.pid !== null && r.pid === m.pid) {
    return fail(step, m, now, "its cmd exited", false)
  }
  onSandboxState(step, m, "running", now)
}

const receive = (step: Step, message: AppMessage, now: number) => {
  const s = step.state
  switch (message._tag) {
    case "Update": {
      if (s.phase !== "active") return
      const respec = message.cmd !== undefined || message.sealedEnv !== undefined
      step.state = {
        ...s,
        ...(message.replicas !== undefined ? { replicas: message.replicas } : {}),
        ...(message.cmd !== undefined ? { cmd: message.cmd } : {}),
        ...(message.sealedEnv !== undefined ? { sealedEnv: message.sealedEnv } : {}),
        revision: respec ? s.revision + 1 : s.revision,
        // A new spec deserves a fresh try; a blocked org still refuses it (and sets it again).
        failures: 0,
        retryAt: null,
        trouble: null
      }
      return
    }
    case "Delete":
      if (s.phase === "active") step.state = { ...s, phase: "deleting", trouble: null }
      return
    case "Tick": {
      // A replica ready long enough proves the app healthy: the backoff starts over.
      const stable = s.members.some((m) => m.phase === "ready" && now - m.since >= STABLE_MS)
      if (stable && s.failures > 0 && !s.blocked) step.state = { ...s, failures: 0 }
      observe(step, now)
      return
    }
    case "SandboxChanged": {
      const m = find(s, message.sandboxId)
      if (m === undefined) return
      if (m.phase === "removing") return onRemovingState(step, m, message.state, now)
      return onSandboxState(step, m, message.state, now, message.reason ?? null)
    }
    case "Observed": {
      if (s.observing?.opId === message.opId) step.state = { ...s, observing: null }
      for (const r of message.replicas) applyObserved(step, r, now)
      return
    }
    case "ReplicaCreated": {
      const pending = s.creating.find((c) => c.opId === message.opId)
      if (pending === undefined || find(s, message.sandboxId) !== undefined) return
      step.state = {
        ...s,
        creating: s.creating.filter((c) => c.opId !== message.opId),
        members: [...s.members, {
          sandboxId: message.sandboxId,
          revision: pending.revision,
          phase: "starting",
          since: now,
          pid: null,
          op: null
        }],
        // The platform takes replicas again.
        blocked: false,
        trouble: s.blocked ? null : s.trouble
      }
      return
    }
    case "CreateRefused": {
      if (!s.creating.some((c) => c.opId === message.opId)) return
      step.state = { ...s, creating: s.creating.filter((c) => c.opId !== message.opId) }
      if (step.state.phase === "active") {
        setBack(
          step,
          now,
          message.blocked ? BLOCKED_REASON : `a replica was refused: ${message.reason}`,
          message.blocked
        )
      }
      return
    }
    case "Launched": {
      const m = find(s, message.sandboxId)
      if (m === undefined || m.phase !== "launching" || m.op !== message.opId) return
      setMember(step, m.sandboxId, { phase: "ready", since: now, pid: message.pid, op: null })
      return
    }
    case "LaunchFailed": {
      const m = find(s, message.sandboxId)
      if (m === undefined || m.phase !== "launching" || m.op !== message.opId) return
      return fail(step, m, now, `its cmd could not be started: ${message.reason}`, false)
    }
    case "Removed": {
      const m = find(s, message.sandboxId)
      if (m === undefined || m.phase !== "removing" || m.op !== message.opId) return
      // Being deleted: its `deleted` event (or an observation) ends it.
      setMember(step, m.sandboxId, message.deleted ? null : { op: null, since: now })
      return
    }
  }
}

const sameView = (a: AppView, b: AppView) =>
  a.state === b.state && a.readyReplicas === b.readyReplicas && a.reason === b.reason &&
  a.sandboxIds.length === b.sandboxIds.length && a.sandboxIds.every((id, i) => b.sandboxIds[i] === id)

export const transition = (s: State | undefined, message: AppMessage, ctx: Ctx): Actor.Transition<State> => {
  // The API inserts the row; a message for an app that does not exist changes nothing.
  if (s === undefined || s.phase === "deleted") return Actor.none()
  const step: Step = { state: s, effects: [] }
  receive(step, message, ctx.now)
  reconcile(step, ctx.now)
  // A running app whose trouble is over forgets it.
  if (view(step.state).state === "running" && step.state.trouble !== null && !step.state.blocked) {
    step.state = { ...step.state, trouble: null }
  }
  const spec = message._tag === "Update" || message._tag === "Delete"
  if (spec || !sameView(view(s), view(step.state))) step.state = { ...step.state, updatedAt: ctx.now }
  return Actor.next(step.state, ...step.effects)
}

/** The state of a new app, before its first reconcile. */
export const initial = (spec: {
  readonly id: string
  readonly orgId: string
  readonly name: string
  readonly template: string
  readonly cmd: ReadonlyArray<string>
  readonly sealedEnv: string
  readonly exposedPorts: ReadonlyArray<number>
  readonly replicas: number
  readonly now: number
}): State => ({
  id: spec.id,
  orgId: spec.orgId,
  name: spec.name,
  template: spec.template,
  cmd: spec.cmd,
  sealedEnv: spec.sealedEnv,
  exposedPorts: spec.exposedPorts,
  replicas: spec.replicas,
  revision: 1,
  phase: "active",
  members: [],
  creating: [],
  nextOp: 1,
  failures: 0,
  retryAt: null,
  blocked: false,
  trouble: null,
  observing: null,
  createdAt: spec.now,
  updatedAt: spec.now
})

/** The first reconcile of a new app (its creates), as the API applies it with the insert. */
export const start = (s: State, now: number): Actor.Transition<State> => {
  const step: Step = { state: s, effects: [] }
  reconcile(step, now)
  return Actor.next(step.state, ...step.effects)
}
