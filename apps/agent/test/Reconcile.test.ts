import { assert, describe, it } from "@effect/vitest"
import { JournalEntry, type PendingOp } from "../src/Journal.ts"
import { plan, undoBy } from "../src/Reconcile.ts"

const entry = (sandboxId: string, pending: PendingOp | null) =>
  new JournalEntry({ sandboxId, orgId: "org_00000000000000000000000000", pending, updatedAt: 1 })

const row = (sandboxId: string, status: "running" | "stopped", internalIp = "10.213.0.9") => ({
  sandboxId,
  status,
  internalIp
})

describe("Reconcile.plan", () => {
  it("undoes unfinished operations: create and destroy by destroying, start and stop by stopping", () => {
    assert.strictEqual(undoBy("create"), "destroy")
    assert.strictEqual(undoBy("destroy"), "destroy")
    assert.strictEqual(undoBy("start"), "stop")
    assert.strictEqual(undoBy("stop"), "stop")
    const actions = plan(
      [entry("d", "destroy"), entry("a", "create"), entry("c", "stop"), entry("b", "start")],
      [row("a", "running"), row("b", "running"), row("c", "running")]
    )
    assert.deepStrictEqual(actions, [
      { _tag: "Undo", sandboxId: "a", pending: "create", by: "destroy" },
      { _tag: "Undo", sandboxId: "b", pending: "start", by: "stop" },
      { _tag: "Undo", sandboxId: "c", pending: "stop", by: "stop" },
      { _tag: "Undo", sandboxId: "d", pending: "destroy", by: "destroy" }
    ])
  })

  it("reports settled sandboxes as the disk has them, vanished ones as gone, and destroys unconfirmed ones", () => {
    const actions = plan(
      [entry("run", null), entry("stop", null), entry("gone", null), entry("half", "create")],
      [
        row("stop", "stopped", "10.213.0.3"),
        row("orphan", "running"),
        row("run", "running", "10.213.0.2"),
        row("half", "stopped")
      ]
    )
    assert.deepStrictEqual(actions, [
      { _tag: "Undo", sandboxId: "half", pending: "create", by: "destroy" },
      { _tag: "DestroyOrphan", sandboxId: "orphan" },
      { _tag: "Vanished", sandboxId: "gone" },
      { _tag: "Report", sandboxId: "run", status: "running", internalIp: "10.213.0.2" },
      { _tag: "Report", sandboxId: "stop", status: "stopped", internalIp: "10.213.0.3" }
    ])
  })

  it("has nothing to do on an empty host", () => {
    assert.deepStrictEqual(plan([], []), [])
  })
})
