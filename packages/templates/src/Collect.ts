/**
 * Image collection (`collect`, on the settling loop after a template is deleted or a build ends,
 * and every ten minutes): a layer of the `images` store that no live template lists, older than
 * `SVC_IMAGE_GC_GRACE`, is removed from the store with its layer-cache entries (the cache first,
 * so that no new build takes it); each host then removes its extracted copy (apps/agent Images).
 * An upload an agent stopped before naming it left (chunks no object names; a temporary name
 * from agents before that) is removed after the same grace.
 * Skipped while any build runs: a running build may have taken such a layer from the cache.
 */
import { Nats } from "@svc/bus/Nats"
import { ensureObjectStore, type ObjectStore, PARTIAL_PREFIX, purgeOrphanChunks } from "@svc/bus/Objects"
import { ensureBucket } from "@svc/bus/Topology"
import { IMAGES_OBJECT_STORE, LAYER_CACHE_BUCKET_SPEC } from "@svc/host-protocol/Images"
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import { ImageGcGrace } from "./Config.ts"
import { layerRows, used } from "./Store.ts"

const LAYER_HEX = /^[0-9a-f]{64}$/

/** Collection runs at least this often (more often when a template goes or a build ends). */
const COLLECT_EVERY_MS = 10 * 60_000

/** The collection: `collect` the layers when due, `due` after a template goes or a build ends. */
/** Chunks no object names are purged only once their newest is this old. */
const ORPHAN_MIN_AGE_MS = 10 * 60 * 1000

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const nats = yield* Nats
  const grace = yield* ImageGcGrace
  const layerCache = yield* ensureBucket(LAYER_CACHE_BUCKET_SPEC).pipe(Effect.orDie)
  // Opened on first use, like the agents do.
  let store: ObjectStore | undefined
  const openStore = Effect.suspend(() =>
    store !== undefined ? Effect.succeed(store) : ensureObjectStore(IMAGES_OBJECT_STORE).pipe(
      Effect.tap((opened) => Effect.sync(() => (store = opened))),
      Effect.provideService(Nats, nats)
    )
  )
  // Due at start (what a previous process left), after a delete or a build's end, and by time.
  let collectDue = true
  let collectedAt = 0

  const collect = Effect.gen(function*() {
    if (!collectDue && Date.now() - collectedAt < COLLECT_EVERY_MS) return []
    const building = yield* used(sql`SELECT id FROM templates WHERE state = 'building' LIMIT 1`)
    if (building.length > 0) return []
    collectDue = false
    collectedAt = Date.now()
    const referenced = yield* layerRows(sql`SELECT DISTINCT jsonb_array_elements_text(layers) AS layer
      FROM templates WHERE deleted_at IS NULL`)
    const keep = new Set(referenced.map((r) => r.layer))
    const cutoff = Date.now() - Duration.toMillis(grace)
    const removed = yield* Effect.gen(function*() {
      const objects = yield* openStore
      const listed = yield* Effect.tryPromise(() => objects.list())
      // An upload a stopped agent left: its chunks, named by nothing (`beginContentPut`), or under
      // the temporary name agents before it used. Never read; no build runs now to be making one.
      yield* Effect.tryPromise(async () => {
        for (const o of listed) {
          if (!o.deleted && o.name.startsWith(PARTIAL_PREFIX) && Date.parse(o.mtime) <= cutoff) {
            await objects.delete(o.name)
          }
        }
        // Never younger than ORPHAN_MIN_AGE_MS, whatever the grace: an upload under way has a
        // chunk seconds old.
        await purgeOrphanChunks(objects, Math.min(cutoff, Date.now() - ORPHAN_MIN_AGE_MS))
      })
      const doomed = listed
        .filter((o) => !o.deleted && LAYER_HEX.test(o.name) && !keep.has(o.name) && Date.parse(o.mtime) <= cutoff)
        .map((o) => o.name)
      if (doomed.length === 0) return []
      const gone = new Set(doomed)
      yield* Effect.tryPromise(async () => {
        const keys: Array<string> = []
        for await (const key of await layerCache.keys()) keys.push(key)
        for (const key of keys) {
          const entry = await layerCache.get(key)
          if (entry?.operation === "PUT" && gone.has(entry.string())) await layerCache.delete(key)
        }
        for (const name of doomed) await objects.delete(name)
      })
      return doomed
    }).pipe(
      Effect.catch((e) =>
        Effect.as(
          Effect.logWarning("templates: collecting image layers failed", { error: String(e) }).pipe(
            Effect.andThen(Effect.sync(() => (collectDue = true)))
          ),
          [] as ReadonlyArray<string>
        )
      )
    )
    if (removed.length > 0) yield* Effect.logInfo("templates: image layers collected", { layers: removed.length })
    return removed
  }).pipe(Effect.withSpan("Templates.collect"))

  return {
    collect,
    due: () => {
      collectDue = true
    }
  }
})
