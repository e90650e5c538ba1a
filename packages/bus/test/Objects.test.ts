/**
 * Object stores (`src/Objects.ts`) on a real NATS: a content-addressed upload fed as its bytes
 * are made is invisible under its name until `commit`, named by the sha256 of its bytes then
 * (read back whole by the library's `get`, which checks that digest), dropped without a trace by
 * `abort`, and a second upload of the same bytes, after or at once, leaves one object.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { beginContentPut, ensureObjectStore, PARTIAL_PREFIX, purgeOrphanChunks } from "@svc/bus/Objects"
import * as TestNats from "@svc/testing/TestNats"
import { Effect } from "effect"
import { createHash, randomBytes } from "node:crypto"

const readAll = async (stream: ReadableStream<Uint8Array>) => {
  const parts: Array<Uint8Array> = []
  for await (const part of stream as unknown as AsyncIterable<Uint8Array>) parts.push(part)
  return Buffer.concat(parts)
}

describe("Objects", () => {
  layer(TestNats.layer, { excludeTestServices: true })((it) => {
    it.effect("a content-addressed upload: hidden until commit, named by its sha256; abort leaves nothing", () =>
      Effect.gen(function*() {
        const store = yield* ensureObjectStore("objects-test")
        const bytes = randomBytes(1536 * 1024 + 7)
        const hex = createHash("sha256").update(bytes).digest("hex")

        const upload = beginContentPut(store, 512 * 1024)
        for (let at = 0; at < bytes.length; at += 100_000) {
          yield* Effect.promise(async () => upload.write(bytes.subarray(at, at + 100_000)))
        }
        // Nothing under the digest, nor anything listed, before the commit.
        expect(yield* Effect.promise(() => store.info(hex))).toBeNull()
        expect(yield* Effect.promise(() => store.list())).toEqual([])
        expect(yield* Effect.promise(() => upload.commit())).toBe(hex)
        const listed = yield* Effect.promise(() => store.list())
        expect(listed.map((o) => o.name)).toEqual([hex])
        const got = yield* Effect.promise(() => store.get(hex))
        expect(yield* Effect.promise(() => readAll(got!.data))).toEqual(bytes)

        // The same bytes again: one object under the name still, no partial left.
        const again = beginContentPut(store, 512 * 1024)
        yield* Effect.promise(async () => again.write(bytes))
        expect(yield* Effect.promise(() => again.commit())).toBe(hex)
        expect((yield* Effect.promise(() => store.list())).map((o) => o.name)).toEqual([hex])

        // Two uploads of other bytes committed at once: one object, both named by it.
        const other = randomBytes(3 * 512 * 1024 + 11)
        const otherHex = createHash("sha256").update(other).digest("hex")
        const racing = [beginContentPut(store, 512 * 1024), beginContentPut(store, 512 * 1024)]
        for (const upload of racing) yield* Effect.promise(async () => upload.write(other))
        expect(yield* Effect.promise(() => Promise.all(racing.map((upload) => upload.commit())))).toEqual([
          otherHex,
          otherHex
        ])
        expect((yield* Effect.promise(() => store.list())).map((o) => o.name).sort()).toEqual([hex, otherHex].sort())
        const gotOther = yield* Effect.promise(() => store.get(otherHex))
        expect(yield* Effect.promise(() => readAll(gotOther!.data))).toEqual(other)
        yield* Effect.promise(() => store.delete(otherHex))

        // Aborted halfway: no object, and the stream holds no chunk of it.
        const before = (yield* Effect.promise(() => store.status())).size
        const dropped = beginContentPut(store, 512 * 1024)
        yield* Effect.promise(async () => dropped.write(randomBytes(2 * 1024 * 1024)))
        yield* Effect.promise(() => dropped.abort())
        const names = (yield* Effect.promise(() => store.list())).map((o) => o.name)
        expect(names).toEqual([hex])
        expect(names.some((n) => n.startsWith(PARTIAL_PREFIX))).toBe(false)
        expect((yield* Effect.promise(() => store.status())).size).toBe(before)

        // Chunks an agent stopped mid-upload left (no meta names them): purged once older than
        // the cutoff, the named objects' chunks kept.
        const nats = yield* Nats
        const orphan = `$O.${nats.name("objects-test")}.C.orphan${randomBytes(4).toString("hex")}`
        yield* Effect.promise(() => nats.js.publish(orphan, randomBytes(4096)))
        expect(yield* Effect.promise(() => purgeOrphanChunks(store, 0))).toBe(0)
        expect((yield* Effect.promise(() => store.status())).size).toBeGreaterThan(before)
        expect(yield* Effect.promise(() => purgeOrphanChunks(store, Date.now() + 60_000))).toBe(1)
        expect((yield* Effect.promise(() => store.status())).size).toBe(before)
        const kept = yield* Effect.promise(() => store.get(hex))
        expect(yield* Effect.promise(() => readAll(kept!.data))).toEqual(bytes)
      }))
  })
})
