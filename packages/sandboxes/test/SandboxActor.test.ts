/**
 * The sandbox actor's transition, pure: every state × every message, against a table written
 * out here (not derived from the code), plus the effects' exact contents.
 */
import { describe, expect, it } from "@effect/vitest"
import type * as Actor from "@svc/actors/Actor"
import { AgentCommand } from "@svc/host-protocol/Protocol"
import { Schema } from "effect"
import {
  commandRefusal,
  SandboxActor,
  type SandboxActorState,
  type SandboxMessage,
  transition
} from "../src/SandboxActor.ts"

const H = "host_a"
const NOW = Date.UTC(2026, 10, 22, 1, 2, 3, 456)
/** Every message as if on the sandbox's host's subject (the control plane's messages ignore the sender). */
const ctx: Actor.TransitionContext = { id: "sbx_1", now: NOW, msgId: "m1", sender: { kind: "host", id: H } }

const STATES = ["pending", "starting", "running", "stopping", "stopped", "deleting", "deleted", "error"] as const
type Name = (typeof STATES)[number]

const at = (name: Name, patch: Partial<SandboxActorState> = {}): SandboxActorState => ({
  id: "sbx_1",
  orgId: "org_1",
  name: "one",
  templateId: "tpl_base",
  templateName: "base",
  hostId: H,
  parentId: null,
  state: name,
  type: "persistent",
  region: "local",
  datacenter: "dc1",
  agentReady: name === "running",
  runtimeReady: false,
  runtimeReason: null,
  cpu: 2,
  ramMb: 256,
  diskGb: 1,
  vsockCid: null,
  internalIp: name === "pending" ? null : "10.0.0.5",
  exposedPorts: [8080],
  volumeAttachments: [],
  metadata: { a: 1 },
  errorMessage: name === "error" ? "earlier failure" : null,
  network: { allow_out: [], deny_out: ["10.0.0.0/8"] },
  secretIds: ["sec_1"],
  timeoutS: null,
  createdAt: NOW - 10_000,
  startedAt: name === "running" ? NOW - 5_000 : null,
  stoppedAt: null,
  deletedAt: null,
  stateSince: NOW - 1_000,
  lastReportAt: 1_000,
  createdEmitted: name === "running" || name === "stopping" || name === "stopped",
  idleTimeoutS: null,
  onTimeout: "stop",
  autoDeleteS: null,
  autoResume: false,
  timeoutFrom: name === "running" ? NOW - 5_000 : null,
  lastActivityAt: name === "running" ? NOW - 5_000 : null,
  busy: false,
  stopReason: null,
  ...patch
})

/** Effects as short strings: `publish:agent.host_a.create`, `event:sandbox.state_updated:running`, `send:sbx_c:Delete`. */
const describeEffects = (effects: ReadonlyArray<Actor.ActorEffect>) =>
  effects.map((e) => {
    switch (e._tag) {
      case "Publish":
        return `publish:${typeof e.subject === "string" ? e.subject : e.subject.join(".")}`
      case "Send":
        return `send:${e.id}:${(e.message as { _tag: string })._tag}`
      case "Kv":
        return `kv:${e.value === null ? "del" : "put"}:${e.bucket}.${e.key}`
      case "Event":
        return e.event.event === "sandbox.state_updated"
          ? `event:sandbox.state_updated:${(e.event.data as { state: string }).state}`
          : `event:${e.event.event}`
    }
  })

type Row = Partial<Record<Name, readonly [Name, ReadonlyArray<string>]>>
const su = (s: Name) => `event:sandbox.state_updated:${s}`
const report = (
  status: "running" | "stopped" | "destroyed" | "failed" | "exited",
  patch: object = {}
): SandboxMessage => ({
  _tag: "AgentReport",
  sandboxId: "sbx_1",
  hostId: H,
  status,
  // An exit is not an answer to a command: no address, no `via`.
  ...(status === "exited"
    ? { errorMessage: "out of memory at ram_mb 256" }
    : { internalIp: "10.0.0.9", via: "cold-boot" }),
  agentReady: status === "running",
  ...(status === "failed" ? { errorMessage: "no space left" } : {}),
  at: 2_000,
  ...patch
})

/** Every state not named in `row` must stay as it is, with no effect. */
const check = (
  message: SandboxMessage,
  row: Row,
  patch: (n: Name) => Partial<SandboxActorState> = () => ({}),
  context: Actor.TransitionContext = ctx
) => {
  for (const name of STATES) {
    const before = at(name, patch(name))
    const result = transition(before, message, context)
    const expected = row[name]
    const got = [result.state?.state, describeEffects(result.effects)]
    if (expected === undefined) {
      expect(got, `${message._tag} in ${name}`).toEqual([name, []])
      expect(result.state?.stateSince, `${message._tag} in ${name}`).toBe(before.stateSince)
    } else {
      expect(got, `${message._tag} in ${name}`).toEqual([expected[0], expected[1]])
      if (expected[0] !== name) expect(result.state?.stateSince).toBe(NOW)
    }
  }
}

/** The runtime never opens the env: any text stands for the API's sealed value. */
const SEALED = "v1.test.sealed-env-the-runtime-cannot-open"

describe("SandboxActor transition", () => {
  it("is the sandbox type with 16 partitions and its own store", () => {
    expect(SandboxActor.type).toBe("sandbox")
    expect(SandboxActor.partitions).toBe(16)
    expect(SandboxActor.store).toBeDefined()
  })

  it("changes nothing for a sandbox that does not exist", () => {
    for (
      const m of [
        { _tag: "Create", sealedEnv: SEALED, unplaceable: null },
        { _tag: "Start" },
        report("running")
      ] as const
    ) {
      expect(transition(undefined, m as SandboxMessage, ctx)).toEqual({ state: undefined, effects: [] })
    }
  })

  it("Create: pending → starting with the agent's create command (the env passed on sealed, unopened); anything else: nothing", () => {
    check({ _tag: "Create", sealedEnv: SEALED, unplaceable: null }, {
      pending: ["starting", [`publish:agent.${H}.create`, su("starting")]]
    })
    const t = transition(at("pending"), { _tag: "Create", sealedEnv: SEALED, unplaceable: null }, ctx)
    const cmd = t.effects[0] as Actor.PublishMessage
    expect(Schema.decodeUnknownSync(AgentCommand)(cmd.payload)).toEqual({
      _tag: "create",
      sandboxId: "sbx_1",
      orgId: "org_1",
      resources: { template: "base", sealedEnv: SEALED, cpu: 2, ramMb: 256, diskGb: 1, exposedPorts: [8080] }
    })
  })

  it("Create without a host: error with the scheduler's reason", () => {
    const t = transition(at("pending", { hostId: null }), {
      _tag: "Create",
      sealedEnv: SEALED,
      unplaceable: "no live host in region eu"
    }, ctx)
    expect(t.state?.state).toBe("error")
    expect(t.state?.errorMessage).toBe("no live host in region eu")
    expect(describeEffects(t.effects)).toEqual([su("error")])
  })

  it("Start: stopped or error (placed on a host) → starting", () => {
    const start = ["starting", [`publish:agent.${H}.start`, su("starting")]] as const
    check({ _tag: "Start" }, { stopped: start, error: start })
    for (const s of STATES) expect(commandRefusal(at(s), "Start") === null).toBe(s === "stopped" || s === "error")
    expect(transition(at("error"), { _tag: "Start" }, ctx).state?.errorMessage).toBe(null)
    // Never placed: nobody could start it.
    expect(commandRefusal(at("error", { hostId: null }), "Start")).toBe(
      "a sandbox that was never placed on a host cannot be started"
    )
    expect(transition(at("error", { hostId: null }), { _tag: "Start" }, ctx).effects).toEqual([])
  })

  it("Stop: only running → stopping", () => {
    check({ _tag: "Stop" }, { running: ["stopping", [`publish:agent.${H}.stop`, su("stopping")]] })
    for (const s of STATES) expect(commandRefusal(at(s), "Stop") === null).toBe(s === "running")
  })

  it("Expire: running → stopping only for the run it was computed on", () => {
    check({ _tag: "Expire", startedAt: NOW - 5_000 }, {
      running: ["stopping", [`publish:agent.${H}.stop`, su("stopping")]]
    }, () => ({ timeoutS: 5 }))
    check({ _tag: "Expire", startedAt: NOW - 99_999 }, {}, () => ({ timeoutS: 5 }))
    // Its timeout removed since (PUT .../timeout with null): nothing.
    check({ _tag: "Expire", startedAt: NOW - 5_000 }, {})
  })

  it("Delete with a live host: deleting + destroy + each child told; pending is deleted at once", () => {
    const m: SandboxMessage = { _tag: "Delete", hostLive: true, children: [{ id: "sbx_c", hostLive: false }] }
    const deleting = ["deleting", [`publish:agent.${H}.destroy`, "send:sbx_c:Delete", su("deleting")]] as const
    check(m, {
      pending: ["deleted", [
        "send:sbx_c:Delete",
        su("deleted"),
        "event:sandbox.deleted",
        "kv:del:egress.sandbox.sbx_1"
      ]],
      starting: deleting,
      running: deleting,
      stopping: deleting,
      stopped: deleting,
      error: deleting
    })
    const t = transition(at("running"), m, ctx)
    const send = t.effects[1] as Actor.SendMessage
    expect(send.message).toEqual({ _tag: "Delete", hostLive: false, children: [] })
  })

  it("Delete with the host down (or never placed): deleted at once, the destroy still published", () => {
    const gone = ["deleted", [
      `publish:agent.${H}.destroy`,
      su("deleted"),
      "event:sandbox.deleted",
      "kv:del:egress.sandbox.sbx_1"
    ]] as const
    check({ _tag: "Delete", hostLive: false, children: [] }, {
      pending: ["deleted", [su("deleted"), "event:sandbox.deleted", "kv:del:egress.sandbox.sbx_1"]],
      starting: gone,
      running: gone,
      stopping: gone,
      stopped: gone,
      error: gone
    })
    const t = transition(at("error", { hostId: null }), { _tag: "Delete", hostLive: true, children: [] }, ctx)
    expect(describeEffects(t.effects)).toEqual([su("deleted"), "event:sandbox.deleted", "kv:del:egress.sandbox.sbx_1"])
    expect(t.state?.deletedAt).toBe(NOW)
    expect((t.effects[1] as Actor.EmitEvent).event.data).toEqual({ sandbox_id: "sbx_1", host_id: null })
  })

  it("report running: starting/error → running (sandbox.created the first time), running refreshes, deleted re-destroys", () => {
    check(report("running"), {
      starting: ["running", ["event:sandbox.created", su("running")]],
      running: ["running", []],
      error: ["running", [su("running")]],
      deleted: ["deleted", [`publish:agent.${H}.destroy`]]
    }, (n) => (n === "error" ? { createdEmitted: true } : {}))
    // error before it ever ran (e.g. a start timeout the host then beat): created fires now.
    const late = transition(at("error"), report("running", { via: "restore" }), ctx)
    expect(describeEffects(late.effects)).toEqual(["event:sandbox.created", su("running")])
    expect((late.effects[0] as Actor.EmitEvent).event.data.via).toBe("restore")
  })

  it("report running carries the record's fields and the events' exact data", () => {
    const t = transition(at("starting"), report("running"), ctx)
    expect(t.state).toMatchObject({
      state: "running",
      internalIp: "10.0.0.9",
      agentReady: true,
      startedAt: NOW,
      lastReportAt: 2_000,
      createdEmitted: true,
      errorMessage: null
    })
    expect(t.effects.map((e) => (e as Actor.EmitEvent).event)).toEqual([
      {
        event: "sandbox.created",
        orgId: "org_1",
        data: {
          sandbox_id: "sbx_1",
          host_id: H,
          template: "tpl_base",
          cpu: 2,
          ram_mb: 256,
          disk_gb: 1,
          via: "cold-boot"
        }
      },
      {
        event: "sandbox.state_updated",
        orgId: "org_1",
        data: { sandbox_id: "sbx_1", state: "running", internal_ip: "10.0.0.9", reason: null }
      }
    ])
    // A restart of a sandbox that already ran: no second sandbox.created.
    const again = transition(at("starting", { createdEmitted: true }), report("running", { via: "restore" }), ctx)
    expect(describeEffects(again.effects)).toEqual([su("running")])
  })

  it("report stopped: running/stopping/error → stopped; an ephemeral sandbox is then deleted", () => {
    check(report("stopped"), {
      running: ["stopped", [su("stopped")]],
      stopping: ["stopped", [su("stopped")]],
      error: ["stopped", [su("stopped")]],
      deleted: ["deleted", [`publish:agent.${H}.destroy`]]
    })
    const t = transition(at("running", { type: "ephemeral" }), report("stopped"), ctx)
    expect(t.state?.state).toBe("deleting")
    expect(describeEffects(t.effects)).toEqual([su("stopped"), `publish:agent.${H}.destroy`, su("deleting")])
  })

  it("report destroyed: deleting → deleted; a sandbox that vanished elsewhere → error", () => {
    const vanished = ["error", [su("error")]] as const
    check(report("destroyed"), {
      deleting: ["deleted", [su("deleted"), "event:sandbox.deleted", "kv:del:egress.sandbox.sbx_1"]],
      starting: vanished,
      running: vanished,
      stopping: vanished,
      stopped: vanished
    })
    expect(transition(at("running"), report("destroyed"), ctx).state?.errorMessage).toMatch(
      /no longer exists on host host_a/
    )
  })

  it("report failed: the command in progress (start, stop, delete) → error with the host's reason", () => {
    const failed = ["error", [su("error")]] as const
    check(report("failed"), { starting: failed, stopping: failed, deleting: failed })
    expect(transition(at("starting"), report("failed"), ctx).state?.errorMessage).toBe(
      "host host_a could not start the sandbox: no space left"
    )
  })

  it("report exited: the init died → error with the host's reason; in error only the reason changes", () => {
    const died = ["error", [su("error")]] as const
    check(report("exited"), {
      starting: died,
      running: died,
      stopping: died,
      error: ["error", []],
      deleted: ["deleted", [`publish:agent.${H}.destroy`]]
    })
    const t = transition(at("running"), report("exited"), ctx)
    expect(t.state).toMatchObject({
      state: "error",
      errorMessage: "out of memory at ram_mb 256",
      agentReady: false,
      internalIp: "10.0.0.5"
    })
    expect((t.effects[0] as Actor.EmitEvent).event.data).toEqual({
      sandbox_id: "sbx_1",
      state: "error",
      internal_ip: "10.0.0.5",
      reason: "error"
    })
    const inError = transition(at("error"), report("exited"), ctx)
    expect(inError.state).toMatchObject({
      state: "error",
      errorMessage: "out of memory at ram_mb 256",
      stateSince: NOW - 1_000
    })
    // Then started again: the host's running report brings it back.
    const started = transition(t.state, { _tag: "Start" }, ctx)
    expect(describeEffects(started.effects)).toEqual([`publish:agent.${H}.start`, su("starting")])
    const back = transition(started.state, report("running", { at: 3_000 }), ctx)
    expect(back.state).toMatchObject({ state: "running", errorMessage: null, agentReady: true })
  })

  it("stale, repeated-in-the-past and foreign reports change nothing in any state", () => {
    const { sender: _, ...noSender } = ctx
    for (const status of ["running", "stopped", "destroyed", "failed", "exited"] as const) {
      check(report(status, { at: 999 }), {})
      check(report(status, { hostId: "host_b" }), {}, undefined, { ...ctx, sender: { kind: "host", id: "host_b" } })
      // Another host's subject, the body claiming the sandbox's host: the subject decides.
      check(report(status), {}, undefined, { ...ctx, sender: { kind: "host", id: "host_b" } })
      // No host on the subject (only the control plane can publish there): not a host's report.
      check(report(status), {}, undefined, noSender)
      check(report(status), {}, undefined, { ...ctx, sender: { kind: "api", id: H } })
    }
    // The sandbox's host's subject with a body naming another host: the subject decides.
    const t = transition(at("starting"), report("running", { hostId: "host_b" }), ctx)
    expect(t.state?.state).toBe("running")
  })

  it("HostDown: its sandboxes → error (deleting → deleted); another host's: nothing", () => {
    const down = ["error", [su("error")]] as const
    check({ _tag: "HostDown", hostId: H, lastSeenAt: NOW - 20_000 }, {
      pending: down,
      starting: down,
      running: down,
      stopping: down,
      stopped: down,
      deleting: ["deleted", [su("deleted"), "event:sandbox.deleted", "kv:del:egress.sandbox.sbx_1"]]
    })
    check({ _tag: "HostDown", hostId: "host_b", lastSeenAt: NOW - 20_000 }, {})
    const t = transition(at("running"), { _tag: "HostDown", hostId: H, lastSeenAt: null }, ctx)
    expect(t.state?.errorMessage).toBe("host host_a is down (its record is gone)")
    expect(t.state?.agentReady).toBe(false)
  })

  it("Timeout: a sandbox still waiting where the sweeper saw it → error; one that moved on: nothing", () => {
    const late = ["error", [su("error")]] as const
    const seen = (n: Name): SandboxMessage => ({ _tag: "Timeout", state: n, since: NOW - 1_000, afterMs: 60_000 })
    for (const name of STATES) {
      const t = transition(at(name), seen(name), ctx)
      const waits = name === "pending" || name === "starting" || name === "stopping" || name === "deleting"
      expect([t.state?.state, describeEffects(t.effects)], name).toEqual(waits ? [...late] : [name, []])
    }
    check({ _tag: "Timeout", state: "starting", since: NOW - 2_000, afterMs: 60_000 }, {})
    expect(transition(at("starting"), seen("starting"), ctx).state?.errorMessage).toBe(
      "the sandbox did not start within 60 s"
    )
  })

  it("the same message applied twice changes nothing the second time", () => {
    const messages: ReadonlyArray<SandboxMessage> = [
      { _tag: "Create", sealedEnv: SEALED, unplaceable: null },
      { _tag: "Start" },
      { _tag: "Stop" },
      { _tag: "Delete", hostLive: true, children: [] },
      report("running"),
      report("stopped"),
      report("destroyed"),
      { _tag: "HostDown", hostId: H, lastSeenAt: 1 }
    ]
    for (const name of STATES) {
      for (const m of messages) {
        const once = transition(at(name), m, ctx)
        const twice = transition(once.state, m, { ...ctx, now: NOW + 1 })
        // A running sandbox re-destroyed after deletion may be told again; nothing else repeats.
        expect(twice.state, `${m._tag} twice in ${name}`).toEqual(once.state)
        expect(describeEffects(twice.effects).filter((e) => !e.endsWith(".destroy")), `${m._tag} twice in ${name}`)
          .toEqual([])
      }
    }
  })

  describe("lifecycle", () => {
    const reasonOf = (t: Actor.Transition<SandboxActorState>) => t.state?.stopReason
    const eventReason = (t: Actor.Transition<SandboxActorState>) =>
      t.effects.flatMap((e) =>
        e._tag === "Event" && e.event.event === "sandbox.state_updated" ? [(e.event.data as any).reason] : []
      )

    it("stop_reason, written out per cause, and carried as the events' `reason`", () => {
      const table: ReadonlyArray<readonly [string, Name, SandboxMessage, Partial<SandboxActorState>, string | null]> = [
        ["user stop", "running", { _tag: "Stop" }, {}, "user"],
        ["usage meter", "running", { _tag: "Stop", reason: "usage_limit" }, {}, "usage_limit"],
        ["timeout_s", "running", { _tag: "Expire", startedAt: NOW - 5_000 }, { timeoutS: 5 }, "timeout"],
        ["idle", "running", { _tag: "Idle", lastActivityAt: NOW - 5_000, children: [] }, { idleTimeoutS: 3 }, "idle"],
        ["oom", "running", report("exited", { outOfMemory: true }), {}, "oom"],
        ["init killed", "running", report("exited", { errorMessage: "killed by signal 9" }), {}, "error"],
        ["oom found in error", "error", report("exited", { outOfMemory: true }), { stopReason: "host_lost" }, "oom"],
        ["host down", "running", { _tag: "HostDown", hostId: H, lastSeenAt: 1 }, {}, "host_lost"],
        ["start failed", "starting", report("failed"), {}, "error"],
        ["gone from its host", "running", report("destroyed"), {}, "error"],
        ["stopped by nobody", "running", report("stopped"), {}, "error"],
        ["stop done keeps why", "stopping", report("stopped"), { stopReason: "idle" }, "idle"],
        ["user delete", "running", { _tag: "Delete", hostLive: true, children: [] }, {}, "user"],
        ["delete keeps a stopped one's", "stopped", { _tag: "Delete", hostLive: true, children: [] }, {
          stopReason: "timeout"
        }, "timeout"],
        ["running again clears it", "starting", report("running"), { stopReason: "oom" }, null]
      ]
      for (const [what, name, message, patch, reason] of table) {
        const t = transition(at(name, patch), message, ctx)
        expect(reasonOf(t), what).toBe(reason)
        for (const r of eventReason(t)) expect(r, what).toBe(reason)
      }
    })

    it("Idle: running → stopping only for the idleness the supervisor saw, never busy", () => {
      const idle: SandboxMessage = { _tag: "Idle", lastActivityAt: NOW - 5_000, children: [] }
      check(idle, { running: ["stopping", [`publish:agent.${H}.stop`, su("stopping")]] }, () => ({ idleTimeoutS: 3 }))
      // Activity reported since, busy now, or no idle limit any more: nothing.
      check(idle, {}, () => ({ idleTimeoutS: 3, lastActivityAt: NOW - 1_000 }))
      check(idle, {}, () => ({ idleTimeoutS: 3, busy: true }))
      check(idle, {})
    })

    it("on_timeout delete: Expire and Idle delete it and its children", () => {
      const children = [{ id: "sbx_c", hostLive: true }]
      const deleting = ["deleting", [`publish:agent.${H}.destroy`, "send:sbx_c:Delete", su("deleting")]] as const
      check({ _tag: "Idle", lastActivityAt: NOW - 5_000, children }, { running: deleting }, () => ({
        idleTimeoutS: 3,
        onTimeout: "delete"
      }))
      check({ _tag: "Expire", startedAt: NOW - 5_000, children }, { running: deleting }, () => ({
        timeoutS: 3,
        onTimeout: "delete"
      }))
      const t = transition(
        at("running", { timeoutS: 3, onTimeout: "delete" }),
        { _tag: "Expire", startedAt: NOW - 5_000, children },
        ctx
      )
      expect(t.state?.stopReason).toBe("timeout")
    })

    it("AutoDelete: a stopped sandbox, for the stop the supervisor saw", () => {
      const m: SandboxMessage = { _tag: "AutoDelete", stoppedAt: NOW - 60_000, children: [] }
      check(m, { stopped: ["deleting", [`publish:agent.${H}.destroy`, su("deleting")]] }, () => ({
        autoDeleteS: 60,
        stoppedAt: NOW - 60_000
      }))
      // Started and stopped again since, or no auto-delete any more: nothing.
      check(m, {}, () => ({ autoDeleteS: 60, stoppedAt: NOW - 1_000 }))
      check(m, {}, () => ({ stoppedAt: NOW - 60_000 }))
    })

    it("a new run starts its lifetime and idle clock; SetTimeout counts them again from now", () => {
      const t = transition(at("starting", { busy: true }), report("running"), ctx)
      expect(t.state).toMatchObject({ timeoutFrom: NOW, lastActivityAt: NOW, busy: false, stopReason: null })
      const kept = transition(
        at("running", { timeoutS: 10, idleTimeoutS: 5 }),
        { _tag: "SetTimeout", timeoutS: 20 },
        ctx
      )
      expect(kept.state).toMatchObject({ timeoutS: 20, timeoutFrom: NOW, idleTimeoutS: 5, lastActivityAt: NOW - 5_000 })
      expect(kept.effects).toEqual([])
      const idle = transition(at("running"), { _tag: "SetTimeout", idleTimeoutS: 30 }, ctx)
      expect(idle.state).toMatchObject({ idleTimeoutS: 30, lastActivityAt: NOW, timeoutS: null })
      const removed = transition(at("running", { timeoutS: 10 }), { _tag: "SetTimeout", timeoutS: null }, ctx)
      expect(removed.state?.timeoutS).toBe(null)
      // Stopped: kept for the next run, whose start sets the clocks.
      const stopped = transition(at("stopped"), { _tag: "SetTimeout", timeoutS: 10 }, ctx)
      expect(stopped.state).toMatchObject({ timeoutS: 10, timeoutFrom: null })
      check({ _tag: "SetTimeout", timeoutS: 10 }, {
        pending: ["pending", []],
        starting: ["starting", []],
        running: ["running", []],
        stopping: ["stopping", []],
        stopped: ["stopped", []],
        error: ["error", []]
      })
    })

    it("ActivityReport: only from its host, only while running, in the runtime's clock, never backwards", () => {
      const activity = (idleMs: number, busy = false): SandboxMessage => ({
        _tag: "ActivityReport",
        sandboxId: "sbx_1",
        hostId: H,
        busy,
        idleMs
      })
      const t = transition(at("running"), activity(1_000), ctx)
      expect(t.state).toMatchObject({ lastActivityAt: NOW - 1_000, busy: false })
      expect(t.effects).toEqual([])
      expect(transition(at("running"), activity(0, true), ctx).state).toMatchObject({ busy: true, lastActivityAt: NOW })
      // Older than what is known: the time stays.
      expect(transition(at("running"), activity(60_000), ctx).state?.lastActivityAt).toBe(NOW - 5_000)
      for (const name of STATES) {
        if (name === "running") continue
        expect(transition(at(name), activity(0, true), ctx).state, name).toEqual(at(name))
      }
      const { sender: _, ...noSender } = ctx
      expect(transition(at("running"), activity(0, true), noSender).state).toEqual(at("running"))
      const foreign = { ...ctx, sender: { kind: "host", id: "host_b" } }
      expect(transition(at("running"), activity(0, true), foreign).state).toEqual(at("running"))
    })
  })
})
