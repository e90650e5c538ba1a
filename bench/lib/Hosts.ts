/** What the benchmarks share about hosts: removing everything an agent left behind. */
import { removeLeftovers } from "@svc/testing/TestHost"
import { Context, Effect, Layer } from "effect"
import * as Fs from "node:fs/promises"
import { SecretBox } from "../../packages/crypto/src/SecretBox.ts"
import { SandboxDriver } from "../../packages/host/src/Driver.ts"
import { BubblewrapDriver } from "../../packages/host/src/Driver/Bubblewrap.ts"
import { CONTROLLERS } from "../../packages/host/src/Driver/Cgroups.ts"
import { DriverConfig } from "../../packages/host/src/Driver/Config.ts"

export const cleanHost = (hostId: string, dataDir: string) =>
  Effect.gen(function*() {
    yield* Effect.scoped(Effect.gen(function*() {
      const context = yield* Layer.build(
        BubblewrapDriver.layer.pipe(
          Layer.provide(Layer.succeed(DriverConfig, DriverConfig.make({ dataDir, hostId }))),
          Layer.provide(SecretBox.layer)
        )
      )
      const driver = Context.get(context, SandboxDriver)
      const rows = yield* driver.list
      yield* Effect.forEach(rows, (row) => Effect.ignore(driver.destroy(row.sandboxId)), { concurrency: 4 })
    })).pipe(Effect.ignore)
    yield* Effect.promise(async () => {
      // What the driver's list missed (a pool entry being made when the agent was killed).
      await removeLeftovers(hostId)
      await Fs.rm(dataDir, { recursive: true, force: true })
      for (const c of CONTROLLERS) await Fs.rmdir(`/sys/fs/cgroup/${c}/svc-sandboxes/${hostId}`).catch(() => undefined)
    })
  })
