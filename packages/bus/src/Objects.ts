/**
 * JetStream object stores under the prefix (`@nats-io/obj`): large content-addressed blobs that
 * every process reaches (image layers, `@svc/host-protocol/Images`). Streams in and out in
 * chunks, never held whole.
 */
import { type ObjectStore, Objm, setSha256Backend } from "@nats-io/obj"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { PassThrough, Readable } from "node:stream"
import { BusError, Nats } from "./Nats.ts"
import { ensureReplicas } from "./Topology.ts"

export type { ObjectStore }

/** Opens (creating when absent) the object store `base` under the prefix. */
export const ensureObjectStore = Effect.fn("Objects.ensure")(function*(base: string) {
  const nats = yield* Nats
  // Node's own SHA-256 for the digest every put and get computes: the library's default is a
  // pure-JS one (for browsers), which was two thirds of an agent's CPU pulling an image
  // (bench/images.ts). Process-wide; a no-op once set.
  setSha256Backend("native")
  const store = yield* Effect.tryPromise({
    try: () => new Objm(nats.js).create(nats.name(base), { replicas: nats.replicas }),
    catch: (cause) => new BusError({ operation: `ensureObjectStore ${base}`, message: String(cause) })
  })
  yield* ensureReplicas(`OBJ_${nats.name(base)}`, nats.replicas)
  return store
})

/** Names of uploads not committed yet (`beginContentPut`): never read; collected when stale. */
export const PARTIAL_PREFIX = "partial-"

const SHA256_DIGEST = /^SHA-256=([A-Za-z0-9_-]{43})=?$/

/** An object being written whose name is the sha256 of its bytes, known only at its end. */
export interface ContentUpload {
  /** The next bytes; waits while the store is behind. */
  write(chunk: Buffer): Promise<void> | void
  /**
   * The object complete: named by the sha256 (hex) of its bytes, which is returned; when the
   * store has that name already (the same bytes), the upload is dropped.
   */
  commit(): Promise<string>
  /** Drops the upload (nothing of it stays in the store). */
  abort(): Promise<void>
}

/**
 * Starts a content-addressed put fed as the bytes are made (a pulled layer, converted while it
 * downloads): under a temporary name (`PARTIAL_PREFIX`) until `commit`, which the caller makes
 * only once the bytes are verified, so a reader of the name never sees unverified bytes. The
 * name's digest is the one the store computes over the chunks it sends: no hashing pass of the
 * caller's own.
 */
export const beginContentPut = (store: ObjectStore, chunkBytes: number): ContentUpload => {
  const temp = `${PARTIAL_PREFIX}${randomBytes(12).toString("hex")}`
  const source = new PassThrough({ highWaterMark: 1024 * 1024 })
  source.on("error", () => undefined)
  const put = store.put(
    { name: temp, options: { max_chunk_size: chunkBytes } },
    Readable.toWeb(source) as unknown as ReadableStream<Uint8Array>
  )
  let failed: unknown
  const settled = put.then(() => undefined, (e) => {
    failed ??= e
  })
  let state: "open" | "committing" | "over" = "open"
  return {
    write: (chunk) => {
      if (failed !== undefined) throw failed
      if (source.write(chunk)) return
      // A put that failed stops reading: its rejection ends the wait (the next write throws).
      return Promise.race([new Promise<void>((resolve) => source.once("drain", resolve)), settled])
    },
    commit: async () => {
      if (state !== "open") throw new Error("the upload is over")
      state = "committing"
      source.end()
      const info = await put
      const digest = SHA256_DIGEST.exec(info.digest)
      if (digest === null) {
        await store.delete(temp).catch(() => undefined)
        throw new Error(`the store named no SHA-256 digest: ${info.digest.slice(0, 80)}`)
      }
      const hex = Buffer.from(digest[1]!, "base64url").toString("hex")
      await store.update(temp, { name: hex }).catch(async (e) => {
        // Another upload of the same bytes won the name: this copy is not needed.
        const present = await store.info(hex).catch(() => null)
        await store.delete(temp).catch(() => undefined)
        if (present === null || present.deleted) throw e
      })
      state = "over"
      return hex
    },
    abort: async () => {
      if (state === "over") return
      const committing = state === "committing"
      state = "over"
      // Errors the stream the store reads: the library purges the chunks sent so far.
      source.destroy(new Error("the upload was aborted"))
      await settled
      if (committing) await store.delete(temp).catch(() => undefined)
    }
  }
}
