/**
 * JetStream object stores under the prefix (`@nats-io/obj`): large content-addressed blobs that
 * every process reaches (image layers, `@svc/host-protocol/Images`). Streams in and out in
 * chunks, never held whole.
 */
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream"
import { type ObjectStore, Objm, setSha256Backend } from "@nats-io/obj"
import { headers, type NatsConnection } from "@nats-io/transport-node"
import { Effect } from "effect"
import { createHash, randomBytes } from "node:crypto"
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

/**
 * Names of uploads not committed yet, as agents before the pipelined `beginContentPut` left them:
 * never read; collected when stale.
 */
export const PARTIAL_PREFIX = "partial-"

/** An object being written whose name is the sha256 of its bytes, known only at its end. */
export interface ContentUpload {
  /** The next bytes; waits while the store is behind. */
  write(chunk: Buffer): Promise<void> | void
  /**
   * The object complete: named by the sha256 (hex) of its bytes, which is returned; when the
   * store has that name already (the same bytes), the upload is dropped.
   */
  commit(): Promise<string>
  /** Drops the upload (nothing of it stays in the store); once `commit` began, waits for its end. */
  abort(): Promise<void>
}

/** Chunks of one upload awaiting their acknowledgement at once. */
const PUT_WINDOW = 4

/** What of the library's store (its class's public fields) a put of our own uses. */
interface StoreInternals {
  readonly js: JetStreamClient & { readonly nc: NatsConnection }
  readonly jsm: JetStreamManager
  readonly name: string
  readonly stream: string
  _chunkSubject(id: string): string
  _metaSubject(name: string): string
}

const internalsOf = (store: ObjectStore): StoreInternals => {
  const impl = store as Partial<StoreInternals>
  if (
    impl.js === undefined || impl.jsm === undefined || typeof impl.name !== "string" ||
    typeof impl.stream !== "string" || typeof impl._chunkSubject !== "function" ||
    typeof impl._metaSubject !== "function"
  ) throw new Error("not a JetStream object store")
  return impl as StoreInternals
}

/** The library's base64url with padding (`Base64UrlPaddedCodec`), as `digest` fields have it. */
const base64UrlPadded = (bytes: Buffer) => bytes.toString("base64").replace(/\+/g, "-").replace(/\//g, "_")

/**
 * Starts a content-addressed put fed as the bytes are made (a pulled layer, converted while it
 * downloads). The object store's own format (chunks under a fresh id, then one meta message
 * naming them), written here rather than by the library's `put`, which awaits each chunk's
 * acknowledgement before it reads the next bytes: up to PUT_WINDOW chunks are in flight (a
 * window of acks), and the meta is published once, under the digest, at `commit`, which the
 * caller makes only once the bytes are verified, so a reader of the name never sees unverified
 * bytes (chunks without a meta are never read). The name's digest is computed over the chunks as
 * they are sent: no hashing pass of the caller's own; a reader (`get`) checks it again.
 */
export const beginContentPut = (store: ObjectStore, chunkBytes: number): ContentUpload => {
  const impl = internalsOf(store)
  const chunkSize = Math.max(1024, Math.min(chunkBytes, impl.js.nc.info?.max_payload ?? 1024))
  const chunkSubject = impl._chunkSubject(randomBytes(16).toString("hex"))
  const nuid = chunkSubject.slice(chunkSubject.lastIndexOf(".") + 1)
  const hash = createHash("sha256")
  // Stream sequences of the chunks' acks, in the order sent: they must rise (stored in order).
  const sequences: Array<number> = []
  const inFlight = new Set<Promise<void>>()
  let size = 0
  let failed: unknown
  let gathering = Buffer.allocUnsafe(chunkSize)
  let filled = 0
  let state: "open" | "committing" | "over" = "open"
  let committing: Promise<string> | undefined

  const publish = (payload: Buffer) => {
    const index = sequences.length
    sequences.push(0)
    hash.update(payload)
    size += payload.length
    const sent: Promise<void> = impl.js.publish(chunkSubject, payload).then(
      (ack) => {
        sequences[index] = ack.seq
      },
      (e) => {
        failed ??= e
      }
    ).finally(() => inFlight.delete(sent))
    inFlight.add(sent)
  }
  const purge = () =>
    impl.jsm.streams.purge(impl.stream, { filter: chunkSubject }).then(() => undefined, () => undefined)
  const settle = async () => {
    while (inFlight.size > 0) await Promise.all(inFlight)
  }

  const commitNow = async (): Promise<string> => {
    try {
      if (filled > 0) publish(gathering.subarray(0, filled))
      await settle()
      if (failed !== undefined) throw failed
      if (sequences.some((seq, i) => i > 0 && seq <= sequences[i - 1]!)) {
        throw new Error("the store did not keep the chunks in order")
      }
      const digest = hash.digest()
      const hex = digest.toString("hex")
      const present = await store.info(hex)
      if (present !== null && !present.deleted) {
        // The same bytes are there already: this copy is not needed.
        await purge()
        state = "over"
        return hex
      }
      const info = {
        name: hex,
        description: "",
        options: { max_chunk_size: chunkSize },
        bucket: impl.name,
        nuid,
        size,
        chunks: sequences.length,
        mtime: new Date().toISOString(),
        digest: `SHA-256=${base64UrlPadded(digest)}`,
        deleted: false
      }
      const h = headers()
      // One meta per name (the library's own put sets it too); published only if no other
      // upload named the object since `info` above.
      h.set("Nats-Rollup", "sub")
      h.set("Nats-Expected-Last-Subject-Sequence", String(present?.revision ?? 0))
      await impl.js.publish(impl._metaSubject(hex), JSON.stringify(info), { headers: h }).catch(async (e) => {
        // Another upload of the same bytes won the name: this copy is not needed.
        const now = await store.info(hex).catch(() => null)
        if (now === null || now.deleted) throw e
        await purge()
      })
      state = "over"
      return hex
    } catch (e) {
      state = "over"
      await purge()
      throw e
    }
  }

  return {
    write: (chunk) => {
      if (state !== "open") throw new Error("the upload is over")
      if (failed !== undefined) throw failed
      for (let at = 0; at < chunk.length;) {
        const n = Math.min(chunk.length - at, chunkSize - filled)
        chunk.copy(gathering, filled, at, at + n)
        filled += n
        at += n
        if (filled === chunkSize) {
          // The client keeps a reference to a payload until it is written: a fresh buffer.
          publish(gathering)
          gathering = Buffer.allocUnsafe(chunkSize)
          filled = 0
        }
      }
      if (inFlight.size < PUT_WINDOW) return
      return Promise.race(inFlight)
    },
    commit: () => {
      if (state !== "open") return Promise.reject(new Error("the upload is over"))
      state = "committing"
      committing = commitNow()
      return committing
    },
    abort: async () => {
      // A commit under way ends as it ends: its meta may be published already.
      if (state === "committing") await committing?.catch(() => undefined)
      if (state === "over") return
      state = "over"
      // What is in flight may still be stored: purged after it settled.
      await settle()
      await purge()
    }
  }
}

/**
 * Purges the chunks no object names whose newest chunk was stored before `before` (ms since the
 * epoch): an upload its agent stopped before `commit` (or before `abort` purged it). Returns how
 * many uploads were purged. The caller runs it when no upload can be in progress, or with a
 * `before` older than any upload takes.
 */
export const purgeOrphanChunks = async (store: ObjectStore, before: number): Promise<number> => {
  const impl = internalsOf(store)
  const named = new Set((await store.list()).map((o) => o.nuid))
  const prefix = impl._chunkSubject("")
  const info = await impl.jsm.streams.info(impl.stream, { subjects_filter: `${prefix}>` })
  let purged = 0
  for (const subject of Object.keys(info.state.subjects ?? {})) {
    if (named.has(subject.slice(prefix.length))) continue
    const last = await impl.jsm.streams.getMessage(impl.stream, { last_by_subj: subject }).catch(() => null)
    if (last === null || last.time.getTime() >= before) continue
    // Named since the listing above: kept.
    if ((await store.list()).some((o) => o.nuid === subject.slice(prefix.length))) continue
    await impl.jsm.streams.purge(impl.stream, { filter: subject })
    purged++
  }
  return purged
}
