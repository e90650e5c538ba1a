/**
 * What a sandbox's `errorMessage` may show its tenant (issue 9, "an error never shows a tenant
 * another tenant's host ids, capacities, host paths or log tails"), through the public API with
 * a real agent: a start that fails on the host names the step, not the driver's message (which
 * holds the host's data folder and the tail of bubblewrap's log; that goes to the agent's log).
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { api, create, EnvLayer, waitState } from "../../testing/SandboxesEnv.ts"

/** The sandbox's folder on the test host (under `/tmp/svc-sbx-api-test-*`). */
const hostFolderOf = (sandboxId: string) =>
  Effect.promise(async () => {
    for (const entry of await Fs.readdir("/tmp")) {
      if (!entry.startsWith("svc-sbx-api-test-")) continue
      const dir = NodePath.join("/tmp", entry, "sandboxes", sandboxId)
      if (FsSync.existsSync(dir)) return dir
    }
    throw new Error(`no host folder for ${sandboxId}`)
  })

layer(EnvLayer, { excludeTestServices: true })("sandbox error messages", (it) => {
  it.effect("a start the host cannot carry out: error naming the step, no host path or log tail", () =>
    Effect.gen(function*() {
      const sandbox = yield* create({ name: "breaks" })
      yield* waitState(sandbox.id, "running")
      expect((yield* api("POST", `/v1/sandboxes/${sandbox.id}/stop`)).status).toBe(202)
      yield* waitState(sandbox.id, "stopped")
      // Its writable layer (its disk image) is gone from the host: it cannot be mounted again.
      const folder = yield* hostFolderOf(sandbox.id)
      yield* Effect.promise(() => Fs.rm(NodePath.join(folder, "disk.img"), { force: true }))
      expect((yield* api("POST", `/v1/sandboxes/${sandbox.id}/start`)).status).toBe(202)
      const failed = yield* waitState(sandbox.id, "error")
      expect(failed.errorMessage).toMatch(/^host host_[0-9a-z]+ could not start the sandbox: start failed on the host$/)
      const text = JSON.stringify(failed)
      for (const leak of [folder, "/tmp/", "bwrap", "overlay", "upper", "disk.img", "loop"]) {
        expect(text).not.toContain(leak)
      }
      const listed = yield* api("GET", "/v1/sandboxes?paginated=false")
      expect(listed.text).not.toContain(folder)
    }))
})
