/**
 * The app controller's decisions, pure: the transition driven message by message, with the
 * operations it asks for checked and answered here (a small world that plays the executor, the
 * sandboxes and their events). No NATS, no Postgres, no clock but the one passed in.
 */
import { describe, expect, it } from "@effect/vitest"
import type * as Actor from "@svc/actors/Actor"
import { Schema } from "effect"
import { AppActor } from "../src/AppActor.ts"
import { type AppControllerState, type AppMessage, AppOperation } from "../src/Apps/Model.ts"
import {
  BACKOFF_MAX_MS,
  backoffMs,
  BLOCKED_REASON,
  initial,
  STABLE_MS,
  start,
  transition,
  view
} from "../src/Apps/Reconcile.ts"

const T0 = Date.UTC(2026, 10, 22, 1, 2, 3, 456)

const fresh = (replicas: number, now = T0) =>
  initial({
    id: "app_1",
    orgId: "org_1",
    name: "web",
    template: "base",
    cmd: ["httpd", "-f"],
    sealedEnv: "sealed-1",
    exposedPorts: [8080],
    replicas,
    now
  })

const ops = (effects: ReadonlyArray<Actor.ActorEffect>): Array<AppOperation> =>
  effects.map((e) => {
    expect(e._tag).toBe("Publish")
    const p = e as Actor.PublishMessage
    const op = Schema.decodeUnknownSync(AppOperation)(p.payload)
    expect(p.subject).toEqual(["appop", op.appId, op._tag])
    return op
  })

/**
 * The controller and a world that answers its operations: sandboxes get ids `sbx_<n>`, run when
 * told, and the `cmd` runs when launched. `pending` holds the operations not answered yet.
 */
const world = (replicas: number) => {
  let now = T0
  let n = 0
  const first = start(fresh(replicas), now)
  let state = first.state!
  let pending: Array<AppOperation> = ops(first.effects)
  const removed: Array<string> = []
  const history: Array<{ ready: number; state: string }> = []
  const send = (message: AppMessage) => {
    const t = transition(state, message, { id: state.id, now, msgId: `m${now}` })
    // The schema round trip the store does.
    state = Schema.decodeUnknownSync(AppActor.state)(Schema.encodeSync(AppActor.state)(t.state ?? state))
    pending.push(...ops(t.effects))
    const v = view(state)
    history.push({ ready: v.readyReplicas, state: v.state })
    return t
  }
  const take = (tag: AppOperation["_tag"]) => {
    const found = pending.filter((op) => op._tag === tag)
    pending = pending.filter((op) => op._tag !== tag)
    return found
  }
  /** Answers one operation as a healthy platform would (a created sandbox runs at once). */
  const answer = (op: AppOperation) => {
    switch (op._tag) {
      case "CreateReplica": {
        const sandboxId = `sbx_${++n}`
        send({ _tag: "ReplicaCreated", opId: op.opId, sandboxId })
        send({ _tag: "SandboxChanged", sandboxId, state: "running" })
        return
      }
      case "LaunchCmd":
        return send({ _tag: "Launched", opId: op.opId, sandboxId: op.sandboxId, pid: "7" })
      case "RemoveReplica":
        removed.push(op.sandboxId)
        return send({ _tag: "Removed", opId: op.opId, sandboxId: op.sandboxId, deleted: true })
      case "Observe":
        return send({
          _tag: "Observed",
          opId: op.opId,
          replicas: op.replicas.map((r) => ({
            sandboxId: r.sandboxId,
            sandbox: "running",
            pid: r.pid,
            process: "none"
          }))
        })
    }
  }
  /** Answers operations (one at a time, oldest first) until none is left. */
  const settle = (limit = 200) => {
    for (let i = 0; pending.length > 0; i++) {
      if (i > limit) throw new Error("the controller does not settle")
      answer(pending.shift()!)
    }
  }
  return {
    get state() {
      return state
    },
    get pending() {
      return pending
    },
    history,
    removed,
    send,
    take,
    answer,
    settle,
    advance: (ms: number) => (now += ms),
    get now() {
      return now
    }
  }
}

const live = (s: AppControllerState) => s.members.filter((m) => m.phase !== "removing")

describe("app controller", () => {
  it("a new app asks for its replicas at once, each created, launched and then ready", () => {
    const first = start(fresh(2), T0)
    const created = ops(first.effects)
    expect(created).toEqual([
      {
        _tag: "CreateReplica",
        opId: "app_1.1",
        appId: "app_1",
        orgId: "org_1",
        revision: 1,
        name: "web-1",
        template: "base",
        sealedEnv: "sealed-1",
        exposedPorts: [8080]
      },
      expect.objectContaining({ _tag: "CreateReplica", opId: "app_1.2", name: "web-2" })
    ])
    expect(view(first.state!)).toMatchObject({ state: "deploying", readyReplicas: 0, sandboxIds: [] })

    const w = world(2)
    const [a, b] = w.take("CreateReplica")
    w.send({ _tag: "ReplicaCreated", opId: a!.opId, sandboxId: "sbx_a" })
    expect(view(w.state)).toMatchObject({ state: "deploying", readyReplicas: 0, sandboxIds: ["sbx_a"] })
    // Not ready while its sandbox starts, nor while its cmd is being started.
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_a", state: "starting" })
    expect(w.take("LaunchCmd")).toEqual([])
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_a", state: "running" })
    const [launch] = w.take("LaunchCmd")
    expect(launch).toMatchObject({ sandboxId: "sbx_a", cmd: ["httpd", "-f"] })
    expect(view(w.state).readyReplicas).toBe(0)
    w.send({ _tag: "Launched", opId: launch!.opId, sandboxId: "sbx_a", pid: "12" })
    expect(view(w.state)).toMatchObject({ state: "deploying", readyReplicas: 1 })
    w.answer(b!)
    w.settle()
    expect(view(w.state)).toEqual({ state: "running", readyReplicas: 2, sandboxIds: ["sbx_a", "sbx_1"], reason: null })
  })

  it("scales up and down: surplus replicas go, not-ready ones first, then the newest", () => {
    const w = world(1)
    w.settle()
    w.send({ _tag: "Update", replicas: 3 })
    expect(view(w.state).state).toBe("deploying")
    const [c1, c2] = w.take("CreateReplica")
    expect(c2).toBeDefined()
    w.send({ _tag: "ReplicaCreated", opId: c1!.opId, sandboxId: "sbx_slow" })
    // Not ready (still starting) and the app asked for fewer: it goes first.
    expect(w.pending).toEqual([])
    w.send({ _tag: "Update", replicas: 1 })
    const removes = w.take("RemoveReplica")
    expect(removes.map((r) => (r as { sandboxId: string }).sandboxId)).toEqual(["sbx_slow"])
    // The other create in flight comes back surplus and goes too.
    w.send({ _tag: "ReplicaCreated", opId: c2!.opId, sandboxId: "sbx_late" })
    const late = w.take("RemoveReplica")
    expect(late.map((r) => (r as { sandboxId: string }).sandboxId)).toEqual(["sbx_late"])
    expect(view(w.state).sandboxIds).toEqual(["sbx_1"])
    // Removal in flight: not settled yet.
    expect(view(w.state).state).toBe("deploying")
    // An outcome of another operation is not this one's.
    w.send({ _tag: "Removed", opId: "other", sandboxId: "sbx_slow", deleted: true })
    expect(w.state.members.map((m) => m.sandboxId)).toContain("sbx_slow")
    // Taken but not through yet (its host is slow): kept until its sandbox is seen deleted.
    w.send({ _tag: "Removed", opId: removes[0]!.opId, sandboxId: "sbx_slow", deleted: false })
    expect(view(w.state).state).toBe("deploying")
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_slow", state: "deleted" })
    w.send({ _tag: "Removed", opId: late[0]!.opId, sandboxId: "sbx_late", deleted: true })
    expect(view(w.state)).toMatchObject({ state: "running", readyReplicas: 1 })

    w.send({ _tag: "Update", replicas: 3 })
    w.settle()
    expect(view(w.state)).toMatchObject({ state: "running", readyReplicas: 3, sandboxIds: ["sbx_1", "sbx_2", "sbx_3"] })
    w.send({ _tag: "Update", replicas: 1 })
    // All ready: the newest go.
    const down = w.take("RemoveReplica")
    expect(down.map((r) => (r as { sandboxId: string }).sandboxId).sort()).toEqual(["sbx_2", "sbx_3"])
    down.forEach(w.answer)
    expect(view(w.state)).toMatchObject({ readyReplicas: 1, sandboxIds: ["sbx_1"] })
    w.send({ _tag: "Update", replicas: 0 })
    w.settle()
    expect(view(w.state)).toEqual({ state: "running", readyReplicas: 0, sandboxIds: [], reason: null })
  })

  it("a replica whose cmd exits, or whose sandbox fails or is deleted, is replaced", () => {
    const w = world(2)
    w.settle()
    expect(view(w.state).readyReplicas).toBe(2)
    w.advance(STABLE_MS + 1)
    // The cmd exited (seen by an observation of the pid it has).
    w.send({
      _tag: "Observed",
      opId: "obs",
      replicas: [{ sandboxId: "sbx_1", sandbox: "running", pid: "7", process: "exited" }]
    })
    expect(view(w.state)).toMatchObject({ state: "degraded", readyReplicas: 1, sandboxIds: ["sbx_2"] })
    expect(view(w.state).reason).toBe("replica sbx_1 failed: its cmd exited")
    expect(w.pending.map((op) => op._tag).sort()).toEqual(["CreateReplica", "RemoveReplica"])
    w.settle()
    expect(view(w.state)).toMatchObject({ state: "running", readyReplicas: 2, reason: null })
    expect(w.removed).toEqual(["sbx_1"])

    // A stale observation (of a pid the replica no longer has) changes nothing.
    w.send({
      _tag: "Observed",
      opId: "old",
      replicas: [{ sandboxId: "sbx_2", sandbox: "running", pid: "99", process: "exited" }]
    })
    expect(view(w.state).readyReplicas).toBe(2)

    // Its host died: the sandbox went to error, and the app says why in the sandbox's words.
    w.advance(STABLE_MS + 1)
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_2", state: "error", reason: "host_lost" })
    expect(view(w.state).readyReplicas).toBe(1)
    expect(view(w.state).reason).toBe("replica sbx_2 failed: its sandbox is error (host_lost)")
    w.settle()
    expect(w.removed).toEqual(["sbx_1", "sbx_2"])
    // Deleted under it: nothing to delete, replaced.
    w.advance(STABLE_MS + 1)
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_3", state: "deleted" })
    expect(view(w.state).reason).toBe("replica sbx_3 failed: its sandbox was deleted")
    expect(w.take("RemoveReplica")).toEqual([])
    w.settle()
    expect(view(w.state)).toMatchObject({ state: "running", readyReplicas: 2 })
    expect(live(w.state).map((m) => m.sandboxId)).toEqual(["sbx_4", "sbx_5"])
    // Found by an observation: stopped out of memory.
    w.advance(STABLE_MS + 1)
    w.send({
      _tag: "Observed",
      opId: "obs2",
      replicas: [{ sandboxId: "sbx_4", sandbox: "error", pid: "7", process: "none", reason: "oom" }]
    })
    expect(view(w.state).reason).toBe("replica sbx_4 failed: its sandbox is error (oom)")
    w.settle()
    // A late event about a replica gone changes nothing.
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_1", state: "running" })
    expect(w.pending).toEqual([])
  })

  it("a cmd that cannot be started fails its replica", () => {
    const w = world(1)
    const [create] = w.take("CreateReplica")
    w.send({ _tag: "ReplicaCreated", opId: create!.opId, sandboxId: "sbx_a" })
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_a", state: "running" })
    const [launch] = w.take("LaunchCmd")
    w.send({ _tag: "LaunchFailed", opId: launch!.opId, sandboxId: "sbx_a", reason: "no such file" })
    expect(view(w.state)).toMatchObject({
      state: "degraded",
      reason: "replica sbx_a failed: its cmd could not be started: no such file"
    })
    expect(w.take("RemoveReplica")).toHaveLength(1)
    // Backoff: no new replica before it ends.
    expect(w.take("CreateReplica")).toEqual([])
    expect(w.state.retryAt).toBe(w.now + backoffMs(1))
  })

  it("a rolling update replaces every replica one at a time, never below replicas - 1 ready", () => {
    for (const replicas of [1, 2, 3]) {
      const w = world(replicas)
      w.settle()
      const before = live(w.state).map((m) => m.sandboxId)
      w.send({ _tag: "Update", cmd: ["httpd", "-f", "-p", "9090"] })
      expect(w.state.revision).toBe(2)
      expect(view(w.state).state).toBe("deploying")
      const mark = w.history.length
      w.settle()
      const during = w.history.slice(mark)
      expect(Math.min(...during.map((h) => h.ready))).toBeGreaterThanOrEqual(replicas)
      // One new replica at a time: never more than replicas + 1 sandboxes.
      expect(view(w.state)).toMatchObject({ state: "running", readyReplicas: replicas })
      expect(w.removed.sort()).toEqual([...before].sort())
      expect(live(w.state).every((m) => m.revision === 2)).toBe(true)
    }
  })

  it("a rolling update stops at the old replicas when new ones cannot be made, and only one is ever surplus", () => {
    const w = world(3)
    w.settle()
    w.send({ _tag: "Update", cmd: ["sh", "-c", "exit 1"] })
    const creates = w.take("CreateReplica")
    expect(creates).toHaveLength(1)
    w.send({ _tag: "CreateRefused", opId: creates[0]!.opId, reason: "quota", blocked: false })
    // The old replicas keep serving.
    expect(view(w.state)).toMatchObject({ state: "degraded", readyReplicas: 3 })
    expect(w.take("RemoveReplica")).toEqual([])
  })

  it("an env change is a new revision too; the same spec again is not", () => {
    const w = world(1)
    w.settle()
    w.send({ _tag: "Update", sealedEnv: "sealed-2" })
    expect(w.state.revision).toBe(2)
    w.settle()
    expect(w.take("CreateReplica")).toEqual([])
    const t = transition(w.state, { _tag: "Update", replicas: 1 }, { id: "app_1", now: w.now, msgId: "u" })
    expect(t.state!.revision).toBe(2)
    expect(t.effects).toEqual([])
  })

  it("a blocked org: the app waits with backoff (no hot loop) and resumes after it", () => {
    const w = world(2)
    w.settle()
    // Billing stopped its sandboxes.
    w.advance(STABLE_MS + 1)
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_1", state: "stopped" })
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_2", state: "stopped" })
    const removes = w.take("RemoveReplica")
    expect(removes).toHaveLength(2)
    for (const r of removes) w.answer(r)
    let asked = 0
    // A minute of ticks every 500 ms, every create refused.
    for (let t = 0; t < 60_000; t += 500) {
      w.advance(500)
      w.send({ _tag: "Tick" })
      for (const op of w.take("CreateReplica")) {
        asked++
        w.send({ _tag: "CreateRefused", opId: op.opId, reason: "402", blocked: true })
      }
      w.take("Observe")
      expect(view(w.state)).toMatchObject({ state: "degraded", readyReplicas: 0, reason: BLOCKED_REASON })
    }
    // At most one attempt per backoff step (15 s at most between): a handful, not 120.
    expect(asked).toBeLessThanOrEqual(2 * 10)
    expect(w.state.retryAt! - w.now).toBeLessThanOrEqual(BACKOFF_MAX_MS)
    // Unblocked: the next attempt goes through, the app runs again.
    w.advance(BACKOFF_MAX_MS)
    w.send({ _tag: "Tick" })
    w.take("Observe")
    w.settle()
    expect(view(w.state)).toMatchObject({ state: "running", readyReplicas: 2, reason: null })
    expect(w.state.blocked).toBe(false)
  })

  it("backoff doubles up to its cap and resets once a replica is stable", () => {
    expect([0, 1, 2, 3, 4, 5, 10].map(backoffMs)).toEqual([0, 1000, 2000, 4000, 8000, 15000, 15000])
    const w = world(1)
    w.settle()
    // Dies young three times in a row.
    for (let i = 0; i < 3; i++) {
      const [m] = live(w.state)
      w.send({ _tag: "SandboxChanged", sandboxId: m!.sandboxId, state: "error" })
      w.take("RemoveReplica").forEach(w.answer)
      expect(w.take("CreateReplica")).toEqual([])
      w.advance(backoffMs(i + 1))
      w.send({ _tag: "Tick" })
      w.take("Observe")
      w.settle()
    }
    expect(w.state.failures).toBe(3)
    w.advance(STABLE_MS)
    w.send({ _tag: "Tick" })
    expect(w.state.failures).toBe(0)
    // An observation is asked once at a time.
    expect(w.take("Observe")).toHaveLength(1)
    w.send({ _tag: "Tick" })
    expect(w.take("Observe")).toEqual([])
  })

  it("delete removes every replica, also those whose create was in flight, then the app is deleted", () => {
    const w = world(2)
    const [a, b] = w.take("CreateReplica")
    w.send({ _tag: "ReplicaCreated", opId: a!.opId, sandboxId: "sbx_a" })
    w.send({ _tag: "Delete" })
    expect(view(w.state)).toMatchObject({ state: "deleting", sandboxIds: [] })
    const [ra] = w.take("RemoveReplica")
    expect(ra).toMatchObject({ sandboxId: "sbx_a" })
    w.send({ _tag: "ReplicaCreated", opId: b!.opId, sandboxId: "sbx_b" })
    const [rb] = w.take("RemoveReplica")
    expect(rb).toMatchObject({ sandboxId: "sbx_b" })
    // Neither an update nor a tick brings anything back.
    w.send({ _tag: "Update", replicas: 5 })
    w.send({ _tag: "Tick" })
    expect(w.take("CreateReplica")).toEqual([])
    w.send({ _tag: "Removed", opId: ra!.opId, sandboxId: "sbx_a", deleted: true })
    expect(w.state.phase).toBe("deleting")
    // A delete its host did not carry out (the sandbox went to error): asked again, then seen through.
    w.send({ _tag: "Removed", opId: rb!.opId, sandboxId: "sbx_b", deleted: false })
    expect(w.take("RemoveReplica")).toEqual([])
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_b", state: "error" })
    const [again] = w.take("RemoveReplica")
    expect(again).toMatchObject({ sandboxId: "sbx_b" })
    expect(w.state.phase).toBe("deleting")
    w.send({ _tag: "Removed", opId: again!.opId, sandboxId: "sbx_b", deleted: true })
    expect(w.state.phase).toBe("deleted")
    expect(view(w.state).state).toBe("deleted")
    // Messages after the end change nothing.
    expect(transition(w.state, { _tag: "Tick" }, { id: "app_1", now: w.now, msgId: "late" }).state).toBeUndefined()
  })

  it("duplicate outcomes are no-ops; updatedAt moves only when the record changes", () => {
    const w = world(1)
    const [create] = w.take("CreateReplica")
    w.send({ _tag: "ReplicaCreated", opId: create!.opId, sandboxId: "sbx_a" })
    const once = w.state
    w.advance(1000)
    w.send({ _tag: "ReplicaCreated", opId: create!.opId, sandboxId: "sbx_a" })
    expect(w.state).toEqual(once)
    w.send({ _tag: "CreateRefused", opId: create!.opId, reason: "late", blocked: true })
    expect(w.state).toEqual(once)
    expect(w.state.updatedAt).toBe(T0)
    w.send({ _tag: "SandboxChanged", sandboxId: "sbx_a", state: "running" })
    const [launch] = w.take("LaunchCmd")
    w.send({ _tag: "Launched", opId: launch!.opId, sandboxId: "sbx_a", pid: "3" })
    expect(w.state.updatedAt).toBe(w.now)
    w.send({ _tag: "Launched", opId: launch!.opId, sandboxId: "sbx_a", pid: "4" })
    expect(w.state.members[0]!.pid).toBe("3")
  })

  it("a message for an app that does not exist changes nothing", () => {
    expect(transition(undefined, { _tag: "Tick" }, { id: "app_x", now: T0, msgId: "m" })).toEqual({
      state: undefined,
      effects: []
    })
  })
})
