/**
 * A test host's clean-up (`src/TestHost.ts`) leaves no sandbox process behind, even one the
 * driver cannot list: a sandbox whose record was never written (its agent killed while it was
 * being made, as a warm pool entry often is) ran on after the test file ended.
 */
import { assert, it } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import { makeHostId } from "@svc/domain/Ids"
import { SandboxDriver, SandboxSpec } from "@svc/host/Driver"
import { BubblewrapDriver } from "@svc/host/Driver/Bubblewrap"
import { DriverConfig } from "@svc/host/Driver/Config"
import { sandboxPaths } from "@svc/host/Driver/State"
import { Context, Effect, Layer } from "effect"
import * as FsSync from "node:fs"
import { processesOfHost } from "../src/HostProcesses.ts"
import { cleanUpHost } from "../src/TestHost.ts"

it.live("a sandbox the driver cannot list (no record) is killed and its groups removed", () =>
  Effect.gen(function*() {
    const host = { hostId: makeHostId(), dataDir: FsSync.mkdtempSync("/tmp/svc-testhost-test-") }
    const pid = yield* Effect.scoped(Effect.gen(function*() {
      const context = yield* Layer.build(
        BubblewrapDriver.layer.pipe(
          Layer.provide(Layer.succeed(DriverConfig, DriverConfig.make(host))),
          Layer.provide(SecretBox.layer)
        )
      )
      const driver = Context.get(context, SandboxDriver)
      const info = yield* driver.create(
        new SandboxSpec({
          sandboxId: "pool-0123456789abcdef",
          template: "base",
          env: {},
          cpu: 1,
          ramMb: 128,
          diskGb: 1,
          exposedPorts: []
        })
      )
      // As if its agent died before writing it: the driver's list skips it.
      FsSync.rmSync(sandboxPaths(host.dataDir, "pool-0123456789abcdef").record)
      assert.deepStrictEqual(yield* driver.list, [])
      return info.pid!
    }))
    assert.isTrue(FsSync.existsSync(`/proc/${pid}`), "the sandbox runs on after its driver stopped")
    assert.isAbove(processesOfHost(host.hostId).length, 0)

    yield* cleanUpHost(host)
    assert.deepStrictEqual(processesOfHost(host.hostId), [])
    assert.isFalse(
      FsSync.existsSync(`/proc/${pid}`) && !/\) [ZX] /.test(FsSync.readFileSync(`/proc/${pid}/stat`, "utf8"))
    )
    assert.isFalse(FsSync.existsSync(host.dataDir))
  }), 120_000)
