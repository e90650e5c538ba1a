/**
 * A host of the test's own for sandboxes: a fresh host id and data dir, and at the end of the
 * scope every sandbox of that host destroyed, its folder removed and its cgroup parents gone.
 */
import { SecretBox } from "@svc/crypto/SecretBox"
import { makeHostId } from "@svc/domain/Ids"
import { SandboxDriver } from "@svc/host/Driver"
import { BubblewrapDriver } from "@svc/host/Driver/Bubblewrap"
import * as Cgroups from "@svc/host/Driver/Cgroups"
import { DriverConfig } from "@svc/host/Driver/Config"
import { Context, Effect, Layer } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"

export interface TestHost {
  readonly hostId: string
  readonly dataDir: string
}

/** Ends every sandbox of the host, removes its folder and its cgroup parents. */
export const cleanUpHost = (host: TestHost) =>
  Effect.gen(function*() {
    if (FsSync.existsSync(NodePath.join(host.dataDir, "sandboxes"))) {
      yield* Effect.scoped(
        Effect.gen(function*() {
          const context = yield* Layer.build(
            BubblewrapDriver.layer.pipe(
              Layer.provide(
                Layer.succeed(DriverConfig, DriverConfig.make({ dataDir: host.dataDir, hostId: host.hostId }))
              ),
              Layer.provide(SecretBox.layer)
            )
          )
          const driver = Context.get(context, SandboxDriver)
          const rows = yield* driver.list
          yield* Effect.forEach(rows, (row) => Effect.ignore(driver.destroy(row.sandboxId)))
        })
      ).pipe(Effect.ignore)
    }
    yield* Effect.promise(async () => {
      await removeLeftovers(host.hostId)
      await Fs.rm(host.dataDir, { recursive: true, force: true })
      await Cgroups.make({ root: "/sys/fs/cgroup", hostId: host.hostId }).removeHost()
    })
  })

/**
 * Kills whatever still runs in the host's sandbox cgroups and removes the groups. The driver's
 * list misses a sandbox whose records were not written when its agent was killed (a warm pool
 * entry being made, a create in flight): its bubblewrap and its init (which outlives a killed
 * bubblewrap: it is pid 1 of its own namespace) ran on after the test. Every process of a
 * sandbox is in its groups, so this finds them all.
 */
export const removeLeftovers = async (hostId: string): Promise<void> => {
  const root = "/sys/fs/cgroup"
  const cgroups = Cgroups.make({ root, hostId })
  const parents = [
    ...Cgroups.CONTROLLERS.map((c) => NodePath.join(root, c, "svc-sandboxes", hostId)),
    NodePath.join(root, "svc-sandboxes", hostId)
  ]
  const names = new Set<string>()
  for (const parent of parents) {
    try {
      for (const entry of FsSync.readdirSync(parent, { withFileTypes: true })) {
        if (entry.isDirectory()) names.add(entry.name)
      }
    } catch {
      // No such parent (the other cgroup version, or nothing was made).
    }
  }
  for (const name of names) await cgroups.removeAll(name).catch(() => undefined)
}

/** A fresh host id and data dir (`/tmp/<prefix>...`), cleaned up when the scope closes. */
export const makeHost = (prefix: string) =>
  Effect.acquireRelease(
    Effect.promise(async (): Promise<TestHost> => ({
      hostId: makeHostId(),
      dataDir: await Fs.mkdtemp(`/tmp/${prefix}`)
    })),
    cleanUpHost
  )
