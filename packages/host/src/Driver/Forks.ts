/**
 * Forks on this host (docs/architecture.md#forks): a running sandbox's writable layer copied once
 * into an extracted layer (`snapshotLayer`), which every fork of one fork request stacks as its
 * top lower folder over the source's own lower folders (`SandboxSpec.forkOf`, read by `create`):
 * one copy of what the source wrote, not one per fork, and each fork's writes go to its own upper
 * layer (copy-on-write by the overlay).
 *
 * The copy is read through the source's host-side monitor (`/proc/<monitor>/root`), as
 * `exportLayer` reads it, and made with `cp -a` into a temporary folder renamed into place: owners
 * stay the canonical range layers are stored in, whiteouts (device 0:0) and overlay's opaque marks
 * (`trusted.*` xattrs) are kept. A marker `<dataDir>/forks/<hex>` says the layer is a fork's: those
 * no sandbox record stacks any more (its `templateDir` names the layer's folder) are removed by
 * `sweepForkLayers`, after a grace for a fork request between its snapshot and its creates.
 */
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { DriverFailure, LayerDigest } from "../Driver.ts"
import * as Layers from "../ImageLayers.ts"
import * as Disk from "./Disk.ts"
import { decodeInput, type DriverHost, HOST_ENV, tryHost } from "./Host.ts"
import { readStoredRecord, sandboxPaths } from "./State.ts"

/** Where the fork markers are: a layer named there is a fork's snapshot, not an image layer. */
export const forksDir = (dataDir: string) => NodePath.join(dataDir, "forks")

const run = (file: string, args: ReadonlyArray<string>) =>
  new Promise<void>((resolve, reject) => {
    execFile(file, args, { env: HOST_ENV, maxBuffer: 4 * 1024 * 1024 }, (error, _out, stderr) => {
      if (error) reject(new Error(`${file}: ${String(stderr).trim().slice(-500) || error.message}`))
      else resolve()
    })
  })

export const makeForks = (host: DriverHost) => {
  const { config } = host

  const snapshotLayer = Effect.fn("SandboxDriver.snapshotLayer")(function*(sandboxId: string, digest: string) {
    const hex = yield* decodeInput(LayerDigest, digest)
    return yield* host.withLock(
      sandboxId,
      Effect.gen(function*() {
        const target = Layers.layerDir(config.dataDir, hex)
        if (FsSync.existsSync(target)) return
        const entry = yield* host.lookupRunning(sandboxId)
        const monitor = entry.run.monitorPid
        if (monitor === undefined) {
          return yield* new DriverFailure({
            operation: "fork",
            message: "the run has no monitor to read its layer through"
          })
        }
        const layout = yield* tryHost("fork", () => Disk.layoutOf(sandboxPaths(config.dataDir, entry.record.sandboxId)))
        const upper = NodePath.join(`/proc/${monitor}/root`, layout.upper)
        yield* tryHost("fork", async () => {
          await Fs.mkdir(forksDir(config.dataDir), { recursive: true, mode: 0o700 })
          // The marker first: a copy cut by a crash is swept like any unused fork layer.
          await Fs.writeFile(NodePath.join(forksDir(config.dataDir), hex), "", { mode: 0o600 })
          await Fs.mkdir(Layers.layersDir(config.dataDir), { recursive: true, mode: 0o711 })
          const temp = await Fs.mkdtemp(NodePath.join(Layers.layersDir(config.dataDir), `.${hex.slice(0, 12)}.fork-`))
          try {
            await run("cp", ["-a", "--reflink=auto", `${upper}/.`, `${temp}/`])
            await Fs.chmod(temp, 0o755)
            await Fs.rename(temp, target)
          } finally {
            await Fs.rm(temp, { recursive: true, force: true }).catch(() => undefined)
          }
        })
      })
    )
  })

  const sweepForkLayers = (graceMs: number) =>
    tryHost("fork", async () => {
      const names = await Fs.readdir(forksDir(config.dataDir)).catch(() => [] as Array<string>)
      if (names.length === 0) return []
      // Every lower folder a sandbox on this host stacks (records are read as they are on disk).
      const used = new Set<string>()
      for (const id of await Fs.readdir(host.sandboxesDir).catch(() => [] as Array<string>)) {
        const record = await readStoredRecord(sandboxPaths(config.dataDir, id)).catch(() => undefined)
        for (const dir of record?.templateDir.split(":") ?? []) used.add(dir)
      }
      const removed: Array<string> = []
      for (const hex of names) {
        if (!Layers.LAYER_HEX.test(hex)) continue
        const marker = NodePath.join(forksDir(config.dataDir), hex)
        const made = await Fs.stat(marker).then((s) => s.mtimeMs, () => 0)
        if (Date.now() - made < graceMs || used.has(Layers.layerDir(config.dataDir, hex))) continue
        await Layers.removeLayer(config.dataDir, hex)
        await Fs.rm(marker, { force: true })
        removed.push(hex)
      }
      return removed
    })

  return { snapshotLayer, sweepForkLayers }
}
