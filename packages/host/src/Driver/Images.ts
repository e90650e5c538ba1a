/**
 * The driver's image files on this host (`ImageLayers.ts`, `Debian.ts`): the roots layers stack on,
 * the extracted layers, and a running sandbox's writable layer exported as a new one.
 *
 * The writable layer lives on the sandbox's disk image, mounted only in the private mount
 * namespace `svc-start` made for it; the host-side bubblewrap (the run's monitor) lives in that
 * namespace, so the layer is read through `/proc/<monitor>/root`, never mounted again.
 */
import { Effect, Schema } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import * as Debian from "../Debian.ts"
import { DriverFailure, type ImageRoot, LayerDigest } from "../Driver.ts"
import * as Layers from "../ImageLayers.ts"
import { BASE_TEMPLATE } from "../Rootfs.ts"
import * as Disk from "./Disk.ts"
import { forksDir } from "./Forks.ts"
import { decodeInput, type DriverHost, tryHost } from "./Host.ts"
import { sandboxPaths } from "./State.ts"

export const makeImages = (host: DriverHost) => {
  const { config } = host
  const templatesDir = NodePath.join(config.dataDir, "templates")
  const cacheDir = config.imageCacheDir ?? NodePath.join(config.dataDir, "cache")
  const digest = (value: string) => decodeInput(LayerDigest, value)

  /**
   * Each root's folder name once made by this process: every create of an image template asks
   * (bench/tti.ts), and the answer is the same while the folder is there (one `stat` instead of
   * the archive's digest read, the root's key hashed and its marker looked up, per create).
   */
  const preparedRoots = new Map<ImageRoot, string>()

  const prepareRoot = Effect.fn("SandboxDriver.prepareRoot")(
    function*(root: ImageRoot, log: (line: string) => void = () => undefined) {
      if (root === BASE_TEMPLATE) return BASE_TEMPLATE
      const known = preparedRoots.get(root)
      if (known !== undefined && FsSync.existsSync(NodePath.join(templatesDir, known, "etc", "debian_version"))) {
        return known
      }
      const [recipe, name] = root === "code"
        ? [Debian.CODE_RECIPE, Debian.CODE_ROOT]
        : [Debian.DEFAULT_RECIPE, Debian.DEBIAN_ROOT]
      const made = yield* tryHost(root, async () => {
        const archive = await Debian.ensureDebianArchive(cacheDir, recipe, log)
        return Debian.ensureDebianRoot(templatesDir, archive, config.uidBase, {
          ...(config.trustedCaPem !== undefined ? { trustedCaPem: config.trustedCaPem } : {}),
          ...(config.egress !== undefined ? { nameserver: host.subnet.gateway } : {})
        }, name)
      })
      preparedRoots.set(root, made)
      return made
    }
  )

  const hasLayer = (value: string) =>
    Effect.flatMap(digest(value), (hex) => tryHost("layer", () => Layers.hasLayer(config.dataDir, hex)))

  const importLayer = (value: string, file: string, options?: { readonly digestChecked?: boolean }) =>
    Effect.flatMap(digest(value), (hex) =>
      tryHost("layer", async () => {
        await Layers.importLayer(config.dataDir, hex, file, config.uidBase, options?.digestChecked === true)
      }))

  const beginLayerImport = tryHost("layer", () => Layers.beginLayerImport(config.dataDir, config.uidBase))

  const removeLayer = (value: string) =>
    Effect.flatMap(digest(value), (hex) => tryHost("layer", () => Layers.removeLayer(config.dataDir, hex)))

  // Image layers only: a fork's snapshot (its marker in `forks/`, written before the layer) is
  // in no image store, and the agent's collection drops a layer the store lacks: an agent
  // restarted while forks are on their way, or stopped, would take their files away.
  const layers = tryHost("layer", async () => {
    const forks = new Set(await Fs.readdir(forksDir(config.dataDir)).catch(() => [] as Array<string>))
    return (await Layers.listLayers(config.dataDir)).filter((hex) => !forks.has(hex))
  })

  const roots = tryHost(
    "debian",
    async (): Promise<ReadonlyArray<ImageRoot>> => [
      ...((await Debian.hasDebianRoot(templatesDir)) ? ["debian" as const] : []),
      ...((await Debian.hasDebianRoot(templatesDir, Debian.CODE_ROOT)) ? ["code" as const] : [])
    ]
  )

  const exportLayer = Effect.fn("SandboxDriver.exportLayer")(function*(sandboxId: string, file: string) {
    const entry = yield* host.lookupRunning(sandboxId)
    const monitor = entry.run.monitorPid
    if (monitor === undefined) {
      return yield* new DriverFailure({
        operation: "export",
        message: "the run has no monitor to read its layer through"
      })
    }
    const paths = sandboxPaths(config.dataDir, entry.record.sandboxId)
    const layout = yield* tryHost("export", () => Disk.layoutOf(paths))
    const upper = NodePath.join(`/proc/${monitor}/root`, layout.upper)
    yield* tryHost("export", async () => {
      await Fs.mkdir(NodePath.dirname(file), { recursive: true })
      await Layers.packLayer(upper, file, config.uidBase, NodePath.dirname(file))
    })
  })

  return {
    prepareRoot,
    hasLayer,
    importLayer,
    beginLayerImport,
    removeLayer,
    layers,
    roots,
    exportLayer
  }
}

export const isLayerDigest = Schema.is(LayerDigest)
