/**
 * One OCI layer blob pulled into a platform layer file: the blob downloaded (bounded) and checked
 * against the descriptor's digest (a tampered layer fails before anything of it is read), then
 * decompressed (gzip, zstd or none), counted against the bounds (a decompression bomb stops at the
 * bound, not when the disk fills) and rewritten by `LayerConvert.ts` into `file`, whose sha256
 * names the platform layer. Streamed: nothing held whole.
 */
import { createHash } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import type { Transform } from "node:stream"
import * as Zlib from "node:zlib"
import { type ConvertedLayer, convertLayer, LayerRefused } from "./LayerConvert.ts"
import { type Descriptor, PullError, type RegistrySession } from "./Registry.ts"

export interface LayerBounds {
  /** Compressed and uncompressed bytes one layer may have. */
  readonly layerMaxBytes: number
  /**
   * The whole image's uncompressed bytes, shared by its layers' pulls (they run concurrently:
   * each chunk is counted as it is unpacked, so their sum cannot pass the bound between them).
   */
  readonly image: ImageBudget
  /** `SVC_IMAGE_LAYER_MAX_BYTES` / `SVC_IMAGE_MAX_BYTES` as the messages name them. */
  readonly layerSetting: string
  readonly imageSetting: string
}

export interface ImageBudget {
  readonly maxBytes: number
  spent: number
}

export interface PulledLayer extends ConvertedLayer {
  /** sha256 of the written platform layer, hex. */
  readonly hex: string
  /** Uncompressed bytes of the OCI layer. */
  readonly bytes: number
}

const GZIP = new Set([
  "application/vnd.oci.image.layer.v1.tar+gzip",
  "application/vnd.docker.image.rootfs.diff.tar.gzip",
  "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
])
const ZSTD = new Set(["application/vnd.oci.image.layer.v1.tar+zstd"])
const PLAIN = new Set(["application/vnd.oci.image.layer.v1.tar", "application/vnd.docker.image.rootfs.diff.tar"])

const decompressor = (mediaType: string): Transform | undefined => {
  if (GZIP.has(mediaType)) return Zlib.createGunzip({ chunkSize: 256 * 1024 })
  if (ZSTD.has(mediaType)) return (Zlib as unknown as { createZstdDecompress: () => Transform }).createZstdDecompress()
  if (PLAIN.has(mediaType)) return undefined
  throw new PullError(`layer media type ${mediaType.slice(0, 100)} is not supported`)
}

const mib = (bytes: number) => `${Math.round(bytes / (1024 * 1024))} MiB`

/** Pulls `layer` from `session` into `file` (removed on failure). */
export const pullLayer = async (
  session: RegistrySession,
  layer: Descriptor,
  file: string,
  bounds: LayerBounds
): Promise<PulledLayer> => {
  if (layer.size > bounds.layerMaxBytes) {
    throw new PullError(
      `layer ${layer.digest.slice(0, 19)} is ${mib(layer.size)}, above the limit of ${
        mib(bounds.layerMaxBytes)
      } (${bounds.layerSetting})`
    )
  }
  const decompress = decompressor(layer.mediaType)
  // The blob is downloaded and checked against its digest before a byte of it is unpacked: a
  // tampered layer fails as such, and nothing unverified reaches the tar reader.
  const blobFile = `${file}.blob`
  try {
    const answer = await session.blob(layer.digest)
    const compressedHash = createHash("sha256")
    let compressed = 0
    const blobOut = FsSync.createWriteStream(blobFile, { mode: 0o600 })
    try {
      for await (const chunk of answer.body) {
        compressed += chunk.length
        if (compressed > bounds.layerMaxBytes) {
          answer.close()
          throw new PullError(
            `layer ${layer.digest.slice(0, 19)} is larger than ${mib(bounds.layerMaxBytes)} (${bounds.layerSetting})`
          )
        }
        compressedHash.update(chunk)
        if (!blobOut.write(chunk)) await new Promise<void>((resolve) => blobOut.once("drain", resolve))
      }
    } finally {
      await new Promise<void>((resolve) => blobOut.end(() => resolve()))
    }
    if (`sha256:${compressedHash.digest("hex")}` !== layer.digest) {
      throw new PullError(`layer ${layer.digest.slice(0, 19)} does not match its digest: tampered with or corrupted`)
    }
    let bytes = 0
    const source = FsSync.createReadStream(blobFile, { highWaterMark: 1024 * 1024 })
    const stream = decompress === undefined ? source : source.pipe(decompress)
    source.on("error", (e) => stream.destroy(e))
    const counted = (async function*() {
      for await (const chunk of stream) {
        bytes += (chunk as Buffer).length
        bounds.image.spent += (chunk as Buffer).length
        if (bytes > bounds.layerMaxBytes || bounds.image.spent > bounds.image.maxBytes) {
          stream.destroy()
          throw new PullError(
            bytes > bounds.layerMaxBytes
              ? `layer ${layer.digest.slice(0, 19)} unpacks to more than ${
                mib(bounds.layerMaxBytes)
              } (${bounds.layerSetting})`
              : `the image unpacks to more than its limit (${bounds.imageSetting})`
          )
        }
        yield chunk as Buffer
      }
    })()
    const out = FsSync.createWriteStream(file, { mode: 0o600 })
    const outHash = createHash("sha256")
    const write = (chunk: Buffer) => {
      outHash.update(chunk)
      if (!out.write(chunk)) return new Promise<void>((resolve) => out.once("drain", resolve))
    }
    try {
      const converted = await convertLayer(counted, write).catch((e) => {
        if (e instanceof LayerRefused) throw new PullError(`layer ${layer.digest.slice(0, 19)}: ${e.message}`)
        if (e instanceof PullError) throw e
        throw new PullError(`layer ${layer.digest.slice(0, 19)}: ${e instanceof Error ? e.message : String(e)}`)
      })
      // The rest (tar's trailing zeros) is read too: the bound counts every byte.
      for await (const _ of counted) { /* drained */ }
      await new Promise<void>((resolve, reject) => out.end((e?: Error | null) => (e ? reject(e) : resolve())))
      return { ...converted, hex: outHash.digest("hex"), bytes }
    } catch (e) {
      stream.destroy()
      out.destroy()
      await Fs.rm(file, { force: true })
      throw e
    }
  } finally {
    await Fs.rm(blobFile, { force: true })
  }
}
