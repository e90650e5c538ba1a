/**
 * Image layers on one host. An image is a root (`base`, built in; or `debian`, built by the
 * platform, see `Debian.ts`) and a stack of layers above it, each the writable layer of one build
 * step (or of a snapshot): a tar of an overlay upper folder, owners as seen inside a sandbox
 * (0..65535), whiteouts and opaque folders included, named by the sha256 of its bytes.
 *
 * A host keeps each layer it has used extracted under `<dataDir>/layers/<hex>/`, owned by the
 * sandboxes' root (shifted by `uidBase`), and mounts the stack as the overlay's lower folders
 * (top first), the sandbox's own writable layer above. Extracted into a temporary folder and
 * renamed into place: a reader sees a whole layer or none.
 */
import { execFile, spawn } from "node:child_process"
import { createHash } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { shiftOwnership } from "./Rootfs.ts"

/** A layer's name: the sha256 of its tar, in hex. */
export const LAYER_HEX = /^[0-9a-f]{64}$/

export const layersDir = (dataDir: string) => NodePath.join(dataDir, "layers")
export const layerDir = (dataDir: string, hex: string) => NodePath.join(layersDir(dataDir), hex)

const HOST_ENV = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" }

/** xattrs a layer keeps: overlay's opaque marks (a folder replaced whole) and file capabilities. */
const XATTRS = ["--xattrs", "--xattrs-include=trusted.overlay.opaque", "--xattrs-include=security.capability"]

const runTar = (args: ReadonlyArray<string>) =>
  new Promise<void>((resolve, reject) => {
    execFile("tar", args, { env: HOST_ENV, maxBuffer: 4 * 1024 * 1024 }, (error, _out, stderr) => {
      if (error) reject(new Error(`tar: ${String(stderr).trim().slice(-500) || error.message}`))
      else resolve()
    })
  })

/** sha256 of a file, hex. */
export const digestFile = (file: string): Promise<string> =>
  new Promise((resolve, reject) => {
    const hash = createHash("sha256")
    FsSync.createReadStream(file).on("data", (chunk) => hash.update(chunk)).on("error", reject).on(
      "end",
      () => resolve(hash.digest("hex"))
    )
  })

/** The distinct owners (uids and gids) under `dir`, without following links. */
const ownersOf = async (dir: string): Promise<Set<number>> => {
  const ids = new Set<number>()
  const visit = async (path: string): Promise<void> => {
    const st = await Fs.lstat(path)
    ids.add(st.uid)
    ids.add(st.gid)
    if (st.isDirectory()) { for (const name of await Fs.readdir(path)) await visit(NodePath.join(path, name)) }
  }
  await visit(dir)
  return ids
}

/**
 * Writes a tar of `dir` (an overlay upper folder, seen from the host) to `file`, owners mapped
 * from the host's (`uidBase + n`) to the sandbox's (`n`), so that any host can shift them to its
 * own range. Sorted names and numeric owners: the same tree gives the same bytes.
 */
export const packLayer = async (dir: string, file: string, uidBase: number, scratch: string): Promise<void> => {
  const map = [...await ownersOf(dir)]
    .filter((id) => id >= uidBase && id < uidBase + 65536)
    .map((id) => `+${id} +${id - uidBase}\n`)
    .join("")
  const mapFile = NodePath.join(scratch, `owners-${process.pid}-${Date.now()}.map`)
  await Fs.writeFile(mapFile, map, { mode: 0o600 })
  try {
    await runTar([
      "--create",
      "--file",
      file,
      "--numeric-owner",
      "--sort=name",
      `--owner-map=${mapFile}`,
      `--group-map=${mapFile}`,
      ...XATTRS,
      "--directory",
      dir,
      "."
    ])
  } finally {
    await Fs.rm(mapFile, { force: true })
  }
}

/**
 * Extracts the layer tar `file` as `<dataDir>/layers/<hex>` (checked against `hex` first, unless
 * `digestChecked`: the caller hashed the bytes as it wrote them), owners shifted to the
 * sandboxes' range. A layer present already is left as it is.
 */
export const importLayer = async (
  dataDir: string,
  hex: string,
  file: string,
  uidBase: number,
  digestChecked = false
): Promise<string> => {
  if (!LAYER_HEX.test(hex)) throw new Error("not a layer digest")
  const target = layerDir(dataDir, hex)
  if (await exists(target)) return target
  if (!digestChecked) {
    const actual = await digestFile(file)
    if (actual !== hex) throw new Error(`layer ${hex.slice(0, 12)}: its bytes digest to ${actual.slice(0, 12)}`)
  }
  await Fs.mkdir(layersDir(dataDir), { recursive: true, mode: 0o711 })
  const temp = await Fs.mkdtemp(NodePath.join(layersDir(dataDir), `.${hex.slice(0, 12)}.import-`))
  try {
    await runTar(["--extract", "--file", file, "--numeric-owner", "--same-permissions", ...XATTRS, "--directory", temp])
    await shiftOwnership(temp, uidBase)
    await Fs.chmod(temp, 0o755)
    await Fs.rename(temp, target).catch(async (e) => {
      // Another import won the race: its tree is the same bytes.
      if (!(await exists(target))) throw e
    })
    return target
  } finally {
    await Fs.rm(temp, { recursive: true, force: true }).catch(() => undefined)
  }
}

/**
 * Bytes a streamed import lets wait for `tar` before `write` waits. `tar`'s stdin takes what its
 * socket buffer holds per event-loop turn: waiting for each 1 MiB chunk to drain made the
 * conversion and `tar` take turns instead of working at once (bench/images.ts: most of a pull's
 * time was spent waiting for `tar`).
 */
const IMPORT_BUFFER_BYTES = 4 * 1024 * 1024

/** A layer tar being extracted as it arrives (`beginLayerImport`). */
export interface LayerImport {
  /** The next bytes of the tar; waits while `tar` is behind. */
  write(chunk: Buffer): Promise<void> | void
  /**
   * The whole tar written, its bytes checked by the caller as `hex`: the layer put in place as
   * `<dataDir>/layers/<hex>` (left as it is when present already).
   */
  commit(hex: string): Promise<string>
  /** Drops what was extracted (the bytes failed a check, or the pull failed). */
  abort(): Promise<void>
}

/**
 * Extracts a layer tar as its bytes arrive (a pulled image's, converted while it downloads), into
 * a hidden temporary folder: nothing of it is at a layer's path until `commit`, which the caller
 * makes only once the bytes are verified. Saves writing the tar to a file and reading it back.
 */
export const beginLayerImport = async (dataDir: string, uidBase: number): Promise<LayerImport> => {
  await Fs.mkdir(layersDir(dataDir), { recursive: true, mode: 0o711 })
  const temp = await Fs.mkdtemp(NodePath.join(layersDir(dataDir), ".stream.import-"))
  const child = spawn(
    "tar",
    ["--extract", "--file", "-", "--numeric-owner", "--same-permissions", ...XATTRS, "--directory", temp],
    { env: HOST_ENV, stdio: ["pipe", "ignore", "pipe"] }
  )
  let stderr = ""
  child.stderr.on("data", (data: Buffer) => (stderr = (stderr + data.toString("utf8")).slice(-2000)))
  // tar gone early shows in `exited`; a write after that must not throw an unhandled EPIPE.
  child.stdin.on("error", () => undefined)
  let failed: Error | undefined
  const exited = new Promise<void>((resolve, reject) => {
    child.on("error", (e) => reject(failed ??= e))
    child.on("close", (code, signal) => {
      if (code === 0) resolve()
      else reject(failed ??= new Error(`tar: ${stderr.trim().slice(-500) || `ended with ${code ?? signal}`}`))
    })
  })
  exited.catch(() => undefined)
  const settled = exited.then(() => undefined, () => undefined)
  let done = false
  const clean = () => Fs.rm(temp, { recursive: true, force: true }).catch(() => undefined)
  return {
    write: (chunk) => {
      if (failed !== undefined) throw failed
      if (child.stdin.write(chunk) || child.stdin.writableLength <= IMPORT_BUFFER_BYTES) return
      return Promise.race([new Promise<void>((resolve) => child.stdin.once("drain", resolve)), settled])
    },
    commit: async (hex) => {
      if (done) throw new Error("the layer import is over")
      done = true
      try {
        if (!LAYER_HEX.test(hex)) throw new Error("not a layer digest")
        child.stdin.end()
        await exited
        const target = layerDir(dataDir, hex)
        if (await exists(target)) return target
        await shiftOwnership(temp, uidBase)
        await Fs.chmod(temp, 0o755)
        await Fs.rename(temp, target).catch(async (e) => {
          // Another import won the race: its tree is the same bytes.
          if (!(await exists(target))) throw e
        })
        return target
      } finally {
        await clean()
      }
    },
    abort: async () => {
      if (done) return
      done = true
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
      await settled
      await clean()
    }
  }
}

/** Whether the host has the layer extracted. */
export const hasLayer = (dataDir: string, hex: string) => exists(layerDir(dataDir, hex))

/** Removes an extracted layer (garbage collection); a sandbox using it keeps its mount. */
export const removeLayer = (dataDir: string, hex: string) =>
  Fs.rm(layerDir(dataDir, hex), { recursive: true, force: true })

/** The extracted layers on this host. */
export const listLayers = async (dataDir: string): Promise<ReadonlyArray<string>> =>
  (await Fs.readdir(layersDir(dataDir)).catch(() => [] as Array<string>)).filter((name) => LAYER_HEX.test(name))

const exists = (path: string): Promise<boolean> => Fs.lstat(path).then(() => true, () => false)
