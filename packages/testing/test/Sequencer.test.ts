import { assert, describe, it } from "@effect/vitest"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { lastOf, needsImageRoots } from "../src/Sequencer.ts"

const repo = NodePath.resolve(NodePath.dirname(fileURLToPath(import.meta.url)), "../../..")

describe("Sequencer", () => {
  it("knows the files that need a built image root by their import of the image cache", async () => {
    assert.isTrue(await needsImageRoots(NodePath.join(repo, "apps/api/test/sandboxes/Contexts.test.ts")))
    assert.isTrue(await needsImageRoots(NodePath.join(repo, "apps/dashboard/test/Workspace.test.ts")))
    assert.isFalse(await needsImageRoots(NodePath.join(repo, "packages/testing/test/Lint.test.ts")))
    assert.isFalse(await needsImageRoots(NodePath.join(repo, "no/such/file.test.ts")))
  })

  it("moves them to the end, keeping both groups' own order", async () => {
    const { order, moved } = await lastOf(["a", "R1", "b", "R2", "c"], async (x) => x.startsWith("R"))
    assert.deepStrictEqual(order, ["a", "b", "c", "R1", "R2"])
    assert.strictEqual(moved, 2)
    assert.deepStrictEqual((await lastOf([], async () => true)).order, [])
  })
})
