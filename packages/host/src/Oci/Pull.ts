/**
 * One OCI layer blob pulled as a platform layer, in one streaming pass: the blob downloaded
 * (bounded) and hashed, and at the same time decompressed (gzip, zstd or none), counted against
 * the bounds (a decompression bomb stops at the bound, not when the disk fills) and rewritten by
 * `LayerConvert.ts` (a bounded parser: a hostile tar is refused, never trusted) into the caller's
 * sink. The blob's digest is known only at its end, so the pull resolves only then, and fails as
 * tampered when it does not match: the caller keeps what the sink received unexposed (an
 * unpublished upload, an extraction in a hidden folder) until then. Nothing held whole.
 */
import { createHash } from "node:crypto"
import { PassThrough, type Transform, type Writable } from "node:stream"
import * as Zlib from "node:zlib"
import { type ConvertedLayer, convertLayer } from "./LayerConvert.ts"
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
  if (GZIP.has(mediaType)) return Zlib.createGunzip({ chunkSize: CHUNK })
  if (ZSTD.has(mediaType)) return (Zlib as unknown as { createZstdDecompress: () => Transform }).createZstdDecompress()
  if (PLAIN.has(mediaType)) return undefined
  throw new PullError(`layer media type ${mediaType.slice(0, 100)} is not supported`)
}

/** Bytes a stage buffers: fewer, larger chunks through the pipeline. */
const CHUNK = 1024 * 1024
/** Downloaded bytes gathered before they go to the decompressor. */
const BATCH = 256 * 1024

const mib = (bytes: number) => `${Math.round(bytes / (1024 * 1024))} MiB`

/** Waits for `drain`, or for the stream's end (destroyed: nothing more to wait for). */
const drained = (stream: Writable) =>
  new Promise<void>((resolve) => {
    const done = () => {
      stream.off("drain", done)
      stream.off("close", done)
      resolve()
    }
    stream.on("drain", done)
    stream.on("close", done)
  })

/**
 * Pulls `layer` from `session`, its platform layer written through `write` as it is converted
 * (which may wait, for backpressure). Resolves only once the whole blob matched its digest: what
 * `write` received is the caller's to use only then (see the module's comment).
 */
export const pullLayer = async (
  session: RegistrySession,
  layer: Descriptor,
  bounds: LayerBounds,
  write: (chunk: Buffer) => Promise<void> | void
): Promise<PulledLayer> => {
  const name = layer.digest.slice(0, 19)
  if (layer.size > bounds.layerMaxBytes) {
    throw new PullError(
      `layer ${name} is ${mib(layer.size)}, above the limit of ${mib(bounds.layerMaxBytes)} (${bounds.layerSetting})`
    )
  }
  const decompress = decompressor(layer.mediaType) ?? new PassThrough({ highWaterMark: CHUNK })
  // Its failures reach the conversion through its reader; this keeps one with none from throwing.
  decompress.on("error", () => undefined)
  const answer = await session.blob(layer.digest)
  const compressedHash = createHash("sha256")
  // Set when the conversion failed: the download goes on only to finish the digest.
  let converting = true
  // Download → digest → decompress, while the conversion below reads the decompressed side.
  // The socket's chunks (16 KiB TLS records) gathered into larger ones: each write into the
  // decompressor is a round trip to zlib's thread, which cost more than the copy.
  let pending: Array<Buffer> = []
  let pendingBytes = 0
  const flush = async () => {
    if (pendingBytes === 0) return
    const batch = pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes)
    pending = []
    pendingBytes = 0
    compressedHash.update(batch)
    if (converting && !decompress.write(batch)) await drained(decompress)
  }
  const download = (async () => {
    let compressed = 0
    try {
      for await (const chunk of answer.body) {
        compressed += chunk.length
        if (compressed > bounds.layerMaxBytes) {
          answer.close()
          throw new PullError(`layer ${name} is larger than ${mib(bounds.layerMaxBytes)} (${bounds.layerSetting})`)
        }
        pending.push(chunk)
        pendingBytes += chunk.length
        if (pendingBytes >= BATCH) await flush()
      }
      await flush()
    } catch (e) {
      decompress.destroy()
      throw e
    }
    if (converting) decompress.end()
    return `sha256:${compressedHash.digest("hex")}` === layer.digest
  })()
  let bytes = 0
  const counted = (async function*() {
    for await (const chunk of decompress) {
      bytes += (chunk as Buffer).length
      bounds.image.spent += (chunk as Buffer).length
      if (bytes > bounds.layerMaxBytes || bounds.image.spent > bounds.image.maxBytes) {
        throw new PullError(
          bytes > bounds.layerMaxBytes
            ? `layer ${name} unpacks to more than ${mib(bounds.layerMaxBytes)} (${bounds.layerSetting})`
            : `the image unpacks to more than its limit (${bounds.imageSetting})`
        )
      }
      yield chunk as Buffer
    }
  })()
  const conversion = (async () => {
    try {
      const converted = await convertLayer(counted, write)
      // The rest (tar's trailing zeros) is read too: the bound counts every byte.
      for await (const _ of counted) { /* drained */ }
      return converted
    } catch (e) {
      converting = false
      decompress.destroy()
      throw e
    }
  })()
  const [downloaded, converted] = await Promise.allSettled([download, conversion])
  // The download's own failure (a bound, a stall, the connection) is the pull's; then a blob not
  // matching its digest fails as tampered, before any complaint about its content.
  if (downloaded.status === "rejected") throw downloaded.reason
  if (!downloaded.value) throw new PullError(`layer ${name} does not match its digest: tampered with or corrupted`)
  if (converted.status === "rejected") {
    const e = converted.reason
    if (e instanceof PullError) throw e
    throw new PullError(`layer ${name}: ${e instanceof Error ? e.message : String(e)}`)
  }
  return { ...converted.value, bytes }
}
