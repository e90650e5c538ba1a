/**
 * The agent's command decision, pure: every command × every observation × every journal state,
 * against a table written out here (not derived from the code). A pair the table does not name is
 * one the runner never asks about: the decision refuses it.
 */
import { describe, expect, it } from "@effect/vitest"
import type { AgentCommand } from "@svc/host-protocol/Protocol"
import { DriverFailure, SandboxAlreadyExists, SandboxNotFound } from "@svc/host/Driver"
import {
  type Action,
  decide,
  type EntryState,
  missingLimits,
  type Observation,
  tracking
} from "../../src/LocalSandboxes/Decision.ts"

const ID = "sbx_1"
const ORG = "org_1"
const COMMANDS: Record<AgentCommand["_tag"], AgentCommand> = {
  create: {
    _tag: "create",
    sandboxId: ID,
    orgId: ORG,
    resources: { template: "base", sealedEnv: "sealed", cpu: 1, ramMb: 256, diskGb: 1, exposedPorts: [] }
  },
  start: { _tag: "start", sandboxId: ID, orgId: ORG },
  stop: { _tag: "stop", sandboxId: ID, orgId: ORG },
  destroy: { _tag: "destroy", sandboxId: ID, orgId: ORG },
  build: { _tag: "build", sandboxId: ID, orgId: ORG, root: "base", layers: [], env: {}, steps: [], timeoutMs: 60_000 }
}
const ENTRIES: ReadonlyArray<EntryState> = ["none", "settled", "pending"]

const notFound = new SandboxNotFound({ sandboxId: ID })
const exists = new SandboxAlreadyExists({ sandboxId: ID })
const broken = new DriverFailure({ operation: "create", message: "no space left on /var/lib" })

/** Every observation the runner can make, by a short name. */
const OBSERVATIONS: Record<string, Observation> = {
  received: { _tag: "Received" },
  prepared: { _tag: "Prepared" },
  "not prepared": { _tag: "NotPrepared", message: "invalid sandbox spec: cpu" },
  "listed repeat: absent": { _tag: "Listed", reason: { _tag: "Repeat" }, listing: { _tag: "Absent" } },
  "listed repeat: stopped": { _tag: "Listed", reason: { _tag: "Repeat" }, listing: { _tag: "Stopped" } },
  "listed repeat: running": {
    _tag: "Listed",
    reason: { _tag: "Repeat" },
    listing: { _tag: "Running", internalIp: "10.0.0.7" }
  },
  "listed exists: absent": { _tag: "Listed", reason: { _tag: "Exists", error: exists }, listing: { _tag: "Absent" } },
  "listed exists: stopped": {
    _tag: "Listed",
    reason: { _tag: "Exists", error: exists },
    listing: { _tag: "Stopped" }
  },
  "listed exists: running": {
    _tag: "Listed",
    reason: { _tag: "Exists", error: exists },
    listing: { _tag: "Running", internalIp: "10.0.0.7" }
  },
  "adopted: booted": { _tag: "Adopted", internalIp: "10.0.0.8", booted: true },
  "adopted: unbooted": { _tag: "Adopted", internalIp: "10.0.0.8", booted: false },
  "not adopted": { _tag: "NotAdopted" },
  "up: create": { _tag: "Up", step: "create", internalIp: "10.0.0.9" },
  "up: start": { _tag: "Up", step: "start", internalIp: "10.0.0.9" },
  "done: stop": { _tag: "Done", step: "stop" },
  "done: destroy": { _tag: "Done", step: "destroy" },
  "create refused: exists": { _tag: "Refused", step: "create", error: exists },
  "create refused: other": { _tag: "Refused", step: "create", error: broken },
  "start refused: not found": { _tag: "Refused", step: "start", error: notFound },
  "start refused: other": { _tag: "Refused", step: "start", error: broken },
  "stop refused: not found": { _tag: "Refused", step: "stop", error: notFound },
  "stop refused: other": { _tag: "Refused", step: "stop", error: broken },
  "destroy refused: not found": { _tag: "Refused", step: "destroy", error: notFound },
  "destroy refused: other": { _tag: "Refused", step: "destroy", error: broken }
}

/** Actions as short strings: `mark:create`, `drive:start`, `running:cold-boot:10.0.0.9:probed+runtime+volumes`. */
const describeAction = (action: Action): string => {
  switch (action._tag) {
    case "Prepare":
      return "prepare"
    case "List":
      return `list:${action.reason._tag === "Repeat" ? "repeat" : `exists:${action.reason.error._tag}`}`
    case "Adopt":
      return "adopt"
    case "Drive":
      return `drive:${action.step}`
    case "Mark":
      return `mark:${action.pending ?? "settled"}`
    case "Forget":
      return "forget"
    case "ForgetRuntime":
      return "forget-runtime"
    case "StopQuietly":
      return "stop-quietly"
    case "Probe":
      return "probe"
    case "Boot":
      return "boot"
    case "ReportRunning":
      return `running:${action.via}:${action.internalIp}:${action.agentReady === true ? "ready" : "probed"}${
        action.runtime ? "+runtime" : ""
      }${action.volumes ? "+volumes" : ""}`
    case "Report":
      return `report:${action.status}`
    case "Fail":
      return `fail:${action.message}`
    case "FailBy":
      return `fail-by:${action.error._tag}`
  }
}

type Expected = ReadonlyArray<string> | Partial<Record<EntryState, ReadonlyArray<string>>>
/** command → observation → actions (the same in every journal state, or by state). */
const TABLE: Record<AgentCommand["_tag"], Record<string, Expected>> = {
  create: {
    received: ["prepare"],
    "not prepared": ["fail:invalid sandbox spec: cpu"],
    prepared: {
      none: ["mark:create", "adopt"],
      settled: ["list:repeat"],
      pending: ["mark:create", "adopt"]
    },
    "listed repeat: absent": ["mark:create", "adopt"],
    "listed repeat: stopped": ["report:stopped"],
    "listed repeat: running": ["probe", "running:cold-boot:10.0.0.7:probed+volumes"],
    "listed exists: absent": ["forget", "fail-by:SandboxAlreadyExists"],
    "listed exists: stopped": ["report:stopped"],
    "listed exists: running": ["probe", "running:cold-boot:10.0.0.7:probed+volumes"],
    "adopted: booted": ["mark:settled", "running:restore:10.0.0.8:ready+runtime"],
    // A template without layers served from the `base` pool: its start_cmd and ready_cmd still run.
    "adopted: unbooted": ["boot", "mark:settled", "running:restore:10.0.0.8:ready+runtime"],
    "not adopted": ["drive:create"],
    // Up once its init wrote the ready byte: agent_ready without an exec.
    "up: create": ["boot", "mark:settled", "running:cold-boot:10.0.0.9:ready+runtime+volumes"],
    "create refused: exists": ["mark:settled", "list:exists:SandboxAlreadyExists"],
    "create refused: other": ["forget", "fail-by:DriverFailure"]
  },
  start: {
    received: {
      none: ["fail:no such sandbox on this host"],
      settled: ["mark:start", "drive:start"],
      pending: ["mark:start", "drive:start"]
    },
    "up: start": ["boot", "mark:settled", "running:restore:10.0.0.9:ready+runtime+volumes"],
    "start refused: not found": ["forget", "fail-by:SandboxNotFound"],
    "start refused: other": ["stop-quietly", "mark:settled", "fail-by:DriverFailure"]
  },
  stop: {
    received: {
      none: ["fail:no such sandbox on this host"],
      settled: ["mark:stop", "drive:stop"],
      pending: ["mark:stop", "drive:stop"]
    },
    "done: stop": ["mark:settled", "report:stopped"],
    "stop refused: not found": ["forget", "fail-by:SandboxNotFound"],
    "stop refused: other": ["mark:settled", "fail-by:DriverFailure"]
  },
  destroy: {
    received: ["mark:destroy", "drive:destroy"],
    "done: destroy": ["forget", "forget-runtime", "report:destroyed"],
    "destroy refused: not found": ["fail-by:SandboxNotFound"],
    "destroy refused: other": ["fail-by:DriverFailure"]
  },
  build: {
    received: ["fail:a build is not a sandbox command"]
  }
}

/** The observations each driver step can come back with: a command is given only its own. */
const OWN: Record<AgentCommand["_tag"], ReadonlyArray<string>> = {
  create: Object.keys(TABLE.create),
  start: Object.keys(TABLE.start),
  stop: Object.keys(TABLE.stop),
  destroy: Object.keys(TABLE.destroy),
  build: ["received"]
}

describe("LocalSandboxes.Decision", () => {
  for (const [tag, command] of Object.entries(COMMANDS) as ReadonlyArray<[AgentCommand["_tag"], AgentCommand]>) {
    it(`${tag}: every observation in every journal state`, () => {
      for (const [name, observation] of Object.entries(OBSERVATIONS)) {
        for (const entry of ENTRIES) {
          const where = `${tag} after ${name}, entry ${entry}`
          const expected = TABLE[tag][name]
          if (expected === undefined) {
            // Step outcomes of other commands (a stop's refusal for a create, say) are never given.
            expect(() => decide({ entry }, command, observation), where).toThrow(/no decision/)
            continue
          }
          const row = Array.isArray(expected)
            ? expected
            : (expected as Partial<Record<EntryState, ReadonlyArray<string>>>)[entry]
          expect(decide({ entry }, command, observation).map(describeAction), where).toEqual(row)
        }
      }
    })
  }

  it("every decision ends with an answer or a step that observes", () => {
    const answers = new Set(["ReportRunning", "Report", "Fail", "FailBy"])
    const observing = new Set(["Prepare", "List", "Adopt", "Drive"])
    for (const [tag, command] of Object.entries(COMMANDS) as ReadonlyArray<[AgentCommand["_tag"], AgentCommand]>) {
      for (const name of OWN[tag]) {
        for (const entry of ENTRIES) {
          const actions = decide({ entry }, command, OBSERVATIONS[name]!)
          const last = actions.at(-1)!
          expect(answers.has(last._tag) || observing.has(last._tag), `${tag} after ${name}`).toBe(true)
          // Only the last action answers or observes: the runner stops there.
          for (const action of actions.slice(0, -1)) {
            expect(answers.has(action._tag) || observing.has(action._tag), `${tag} after ${name}`).toBe(false)
          }
        }
      }
    }
  })

  it("a sandbox without one of its limits is refused unless unlimited sandboxes are allowed", () => {
    const all = { memory: "applied", cpu: "applied", pids: "applied", disk: "applied" } as const
    expect(missingLimits({ limits: all }, false)).toEqual([])
    expect(missingLimits({ limits: { ...all, cpu: "cpu.max not writable" } }, false)).toEqual([
      "cpu: cpu.max not writable"
    ])
    expect(missingLimits({ limits: { ...all, memory: "no memory controller", pids: "no pids" } }, false))
      .toEqual(["memory: no memory controller", "pids: no pids"])
    expect(missingLimits({ limits: { ...all, pids: "no pids" } }, true)).toEqual([])
  })

  it("the sandboxes watched for exits follow the reports", () => {
    //   report    | create | start  | stop   | destroy | reconcile
    const table = {
      running: ["add", "add", "add", "add", "add"],
      stopped: ["remove", "remove", "remove", "remove", "remove"],
      destroyed: ["remove", "remove", "remove", "remove", "remove"],
      exited: ["remove", "remove", "remove", "remove", "remove"],
      // A refused stop or destroy leaves the sandbox as it was: still running.
      failed: ["remove", "remove", "keep", "keep", "keep"]
    } as const
    const commands = ["create", "start", "stop", "destroy", "reconcile"] as const
    for (const [status, row] of Object.entries(table)) {
      for (const [i, command] of commands.entries()) {
        expect(tracking(command, status as keyof typeof table), `${status} after ${command}`).toBe(row[i])
      }
    }
  })
})
