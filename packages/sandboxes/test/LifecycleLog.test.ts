/** The lifecycle lines a sandbox's events make, pure: each event against the line written out here. */
import { describe, expect, it } from "@effect/vitest"
import { lifecycleText } from "@svc/host-protocol/SandboxTelemetry"
import { lineOf } from "../src/LifecycleLog.ts"

const ts = "2026-01-01T00:00:00.000Z"
const state = (s: string, reason?: string | null) => ({
  event: "sandbox.state_updated" as const,
  ts,
  data: { sandbox_id: "sbx_1", state: s as any, ...(reason !== undefined ? { reason } : {}) }
})

describe("lifecycle lines", () => {
  const table: ReadonlyArray<readonly [string, Parameters<typeof lineOf>[0], string | undefined]> = [
    [
      "created",
      {
        event: "sandbox.created",
        ts,
        data: {
          sandbox_id: "sbx_1",
          host_id: "host_1",
          template: "tpl_1",
          cpu: 2,
          ram_mb: 512,
          disk_gb: 4,
          via: "restore"
        }
      },
      "created: host host_1, template tpl_1, 2 cpu, 512 MiB, 4 GiB (restore)"
    ],
    ["starting", state("starting"), "starting"],
    ["running", state("running"), "started"],
    ["stopping", state("stopping"), "stopping"],
    ["stopped without a reason", state("stopped"), "stopped"],
    ["stopped with a null reason", state("stopped", null), "stopped"],
    ["stopped with its reason", state("stopped", "idle"), "stopped (reason: idle)"],
    ["error with its reason", state("error", "oom"), "error (reason: oom)"],
    ["deleting", state("deleting", "user"), "deleting (reason: user)"],
    ["pending: no line", state("pending"), undefined],
    ["deleted: no line (its log is purged)", state("deleted"), undefined],
    ["sandbox.deleted: no line", { event: "sandbox.deleted", ts, data: { sandbox_id: "sbx_1" } }, undefined]
  ]
  for (const [name, event, text] of table) {
    it(name, () => {
      const line = lineOf(event)
      expect(line === undefined ? undefined : lifecycleText(line)).toBe(text)
    })
  }

  it("the host's words", () => {
    expect(lifecycleText({ _tag: "out_of_memory", message: "out of memory at ram_mb 64" }))
      .toBe("out of memory: out of memory at ram_mb 64")
    expect(lifecycleText({ _tag: "exited", message: "exited with code 3" })).toBe("exited: exited with code 3")
    expect(lifecycleText({ _tag: "error", reason: null, message: "boom" })).toBe("error: boom")
  })
})
