/**
 * Warm pools: sandboxes made ahead, so that a create a pool serves takes one and gives it the new
 * sandbox's identity instead of cold-booting. There is one pool per kind: `base` (its size the
 * agent's `SVC_AGENT_POOL_SIZE`) and one per template whose `pools` KV entry names this host
 * (its size the template's `pool_size`, docs/architecture.md#warm-pools). A template's entries are
 * booted as its sandboxes are (`warm`: `start_cmd` started, `ready_cmd` passed) before they count
 * as ready, so handing one out skips the boot too (`booted`).
 *
 * Entries are driver sandboxes named `pool-<hex>` (platform ids are `sbx_...`, so the two never
 * meet). They have no journal entry: a restarted agent's reconcile destroys them as orphans and
 * the pools are made again; a graceful stop destroys them. They are in no database row, so no
 * quota counts them and no usage is metered for them until one is handed out.
 *
 * Each missing entry is one item in `wanted` (the kind's key): one per slot once reconcile has
 * run (`fill`; before, reconcile would destroy entries as orphans), one more for each entry
 * taken. `poolMakers` fibers take items and make entries, so ready + being made + wanted is
 * always a pool's size: refills run side by side and never overshoot. A create never waits for
 * them: it takes a ready entry or cold-boots. A template pool's refill waits for a pause in the
 * hand-outs: it starts once no entry was handed out for `REFILL_DELAY_MS`, or at the latest
 * `REFILL_MAX_WAIT_MS` after it was asked for, so that the creates being served do not share the
 * cores with template boots; `base`'s starts at once.
 *
 * A kind set again with another `version` (its image or commands changed) or removed is drained:
 * its ready entries are destroyed, and those being made are destroyed when done. A smaller size
 * destroys the ready entries beyond it.
 */
import { type DriverFailure, type SandboxDriver, type SandboxInfo, SandboxSpec } from "@svc/host/Driver"
import { BASE_TEMPLATE } from "@svc/host/Rootfs"
import { Duration, Effect, Queue } from "effect"
import { randomBytes } from "node:crypto"
import * as Os from "node:os"
import { describeDriverError } from "./DriverErrors.ts"

export const POOL_PREFIX = "pool-"
/** The platform's default disk: an entry's disk image is not resized when it is adopted. */
const POOL_DISK_GB = 1
/** The `base` pool's key (template ids are `tpl_...`). */
export const BASE_POOL = "base"
const poolEntrySpec = (sandboxId: string) =>
  new SandboxSpec({
    sandboxId,
    template: BASE_TEMPLATE,
    env: {},
    cpu: 1,
    ramMb: 256,
    diskGb: POOL_DISK_GB,
    exposedPorts: []
  })

/**
 * Whether a sandbox can be a `base` pool entry: only sandboxes of the `base` root without layers
 * of the entries' disk size. A pool entry runs already: volumes are mounted as a sandbox starts,
 * so those cold-boot.
 */
export const pooled = (spec: SandboxSpec): boolean =>
  spec.template === BASE_TEMPLATE && (spec.layers === undefined || spec.layers.length === 0) &&
  spec.diskGb === POOL_DISK_GB && (spec.volumes ?? []).length === 0

/** What a template's pool needs to make entries and to judge a create (`LocalSandboxes.setPool`). */
export interface TemplateImage {
  /** The root as the driver names it (`prepareRoot`'s answer). */
  readonly template: string
  readonly layers: ReadonlyArray<string>
  readonly env: Readonly<Record<string, string>>
  readonly startCmd: string | null
  readonly readyCmd: string | null
}

const sameEnv = (a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>) => {
  const keys = Object.keys(a)
  return keys.length === Object.keys(b).length && keys.every((k) => b[k] === a[k])
}

/**
 * Whether a template pool's entry can become this sandbox: its image, the entries' disk, no
 * volumes, and, when the template has a `start_cmd` (which ran in the entry before the create
 * was known), no env beyond the template's own: that process must see what the create asked for,
 * so such a create cold-boots.
 */
export const fitsTemplate = (image: TemplateImage, spec: SandboxSpec): boolean =>
  spec.template === image.template && spec.diskGb === POOL_DISK_GB && (spec.volumes ?? []).length === 0 &&
  (spec.layers ?? []).length === image.layers.length && (spec.layers ?? []).every((l, i) => image.layers[i] === l) &&
  (image.startCmd === null || sameEnv(spec.env, image.env))

/** The entries' memory while pooled (a template's `start_cmd` may run a server); set to the create's at hand-out. */
const TEMPLATE_ENTRY_RAM_MB = 512

const templateEntrySpec = (image: TemplateImage) => (sandboxId: string) =>
  new SandboxSpec({
    sandboxId,
    template: image.template,
    env: { ...image.env },
    cpu: 1,
    ramMb: TEMPLATE_ENTRY_RAM_MB,
    diskGb: POOL_DISK_GB,
    exposedPorts: [],
    ...(image.layers.length > 0 ? { layers: [...image.layers] } : {})
  })

export interface PoolStatus {
  /** The `base` pool's ready entries (driver ids) and how many are being made. */
  readonly ready: ReadonlyArray<string>
  readonly making: number
  /** Each template pool: its size, ready entries and entries being made. */
  readonly templates: Readonly<
    Record<string, { readonly size: number; readonly ready: ReadonlyArray<string>; readonly making: number }>
  >
}

/**
 * How many pool entries are made at once. Making one is CPU work (process starts, namespaces,
 * cgroup and veth writes: ~60 ms of it here), so one core is left to the creates being served:
 * on a 2-core host two makers kept the pool full but raised create → running p50 by ~5 ms
 * (bench/sandboxes.ts, six alternating runs), so there it is one; bigger hosts refill side by
 * side. Never more than the pools' sizes.
 */
export const poolMakers = (poolSize: number) => Math.max(1, Math.min(poolSize, Os.availableParallelism() - 1))

export interface PoolOptions {
  /** The `base` pool's size. */
  readonly size: number
  readonly driver: SandboxDriver["Service"]
  /** Whether a sandbox answers an exec (`Readiness.ts`). */
  readonly probe: (sandboxId: string) => Effect.Effect<boolean>
  /** A template's boot in an entry: its `start_cmd` started, then whether its `ready_cmd` passed (`Readiness.ts`). */
  readonly warm: (
    sandboxId: string,
    runtime: { readonly startCmd: string | null; readonly readyCmd: string | null }
  ) => Effect.Effect<boolean>
  /** The pause in hand-outs a template pool's refill waits for (default `REFILL_DELAY_MS`). */
  readonly refillDelayMs?: number
  /** The longest a template pool's refill waits for that pause (default `REFILL_MAX_WAIT_MS`). */
  readonly refillMaxWaitMs?: number
  /** A create or start checked for the host's limits, undone without them (`LocalSandboxes.ts`). */
  readonly limited: <E>(
    started: Effect.Effect<SandboxInfo, E>,
    undo: Effect.Effect<void>
  ) => Effect.Effect<SandboxInfo, E | DriverFailure>
}

/** A wanted entry: its pool's key, and until when a template's waits for a pause in the hand-outs. */
interface Wanted {
  readonly key: string
  readonly waitUntil: number
}

/**
 * The pause in hand-outs (of any pool on this host) a template pool's refill waits for. Making a
 * template's entry is a boot (process starts, mounts, its start_cmd, its ready_cmd tried until it
 * passes), and after a hand-out the create it served is still on its way to the caller (the
 * report, the runtime's write, the event, the API's answer, then the caller's first commands):
 * a refill started then ran inside the pooled create's window and delayed its `running` on a
 * loaded 2-core host (bench/pools.ts, traced). In a stream or a burst of pooled creates a refill
 * a fixed delay after each hand-out ran beside the next creates, one boot per create, so that the
 * pool saved nothing end to end (bench/tti.ts's pooled modes, bench/README.md): it waits until
 * the creates pause. The `base` pool refills at once: its entry takes ~60 ms, and in a stream of
 * creates a delay would empty it (bench/README.md, "Pool makers side by side").
 */
export const REFILL_DELAY_MS = 1_000

/**
 * The longest a template pool's refill waits for a pause in the hand-outs: a steady stream of
 * creates gets its pool back within this, at the cost of sharing the cores with its boots then.
 */
export const REFILL_MAX_WAIT_MS = 10_000

interface Kind {
  readonly key: string
  readonly size: number
  readonly version: string
  readonly spec: (sandboxId: string) => SandboxSpec
  readonly image: TemplateImage | undefined
}

interface Slot {
  kind: Kind
  readonly ready: Array<string>
  making: number
  wanted: number
}

/** How many makers the template pools may use at once (a template boot waits on its `ready_cmd`). */
const TEMPLATE_MAKERS = 2

/** The pools, their makers forked in the scope (which destroys their entries when it closes). */
export const makePool = (options: PoolOptions) =>
  Effect.gen(function*() {
    const { driver, limited, probe, size, warm } = options
    const refillDelayMs = options.refillDelayMs ?? REFILL_DELAY_MS
    const refillMaxWaitMs = options.refillMaxWaitMs ?? REFILL_MAX_WAIT_MS
    /** When an entry of any pool was last handed out (ms since the epoch). */
    let lastHandOut = 0
    const slots = new Map<string, Slot>()
    let filled = false
    // `base` and the templates have makers of their own: a template's boot (which waits for its
    // `ready_cmd`) never holds up the `base` pool's refills, nor the reverse.
    const wantedBase = yield* Queue.unbounded<Wanted>()
    const wantedTemplates = yield* Queue.unbounded<Wanted>()
    /** Asks for `n` entries of the slot. */
    const want = (slot: Slot, n: number) => {
      const waitUntil = Date.now() + refillMaxWaitMs
      for (let i = 0; i < n; i++) {
        slot.wanted++
        Queue.offerUnsafe(slot.kind.key === BASE_POOL ? wantedBase : wantedTemplates, { key: slot.kind.key, waitUntil })
      }
    }
    const baseKind: Kind = { key: BASE_POOL, size, version: "base", spec: poolEntrySpec, image: undefined }
    slots.set(BASE_POOL, { kind: baseKind, ready: [], making: 0, wanted: 0 })

    const destroyAll = (ids: ReadonlyArray<string>) =>
      Effect.forEach(ids, (id) => Effect.ignore(driver.destroy(id)), { concurrency: 4, discard: true })

    // Uninterruptible from its start to `ready.push`: an entry made is always either in a slot
    // (where the finalizer finds it) or destroyed.
    const makeEntry = (slot: Slot) =>
      Effect.uninterruptible(
        Effect.gen(function*() {
          const kind = slot.kind
          const id = `${POOL_PREFIX}${randomBytes(8).toString("hex")}`
          slot.making++
          const made = yield* Effect.result(
            Effect.gen(function*() {
              yield* driver.create(kind.spec(id))
              if (!(yield* probe(id))) return yield* Effect.fail("the pool entry did not answer")
              if (kind.image !== undefined && !(yield* warm(id, kind.image))) {
                return yield* Effect.fail("the template's ready_cmd did not pass in the pool entry")
              }
            }).pipe(
              // A create that failed half-way can leave a folder behind: nothing of it may stay.
              Effect.onError(() => Effect.ignore(driver.destroy(id)))
            )
          )
          // In one step: the status never counts the entry twice or not at all.
          slot.making--
          if (made._tag === "Failure") return made
          // Drained meanwhile (removed, another version, made smaller): not kept.
          if (
            slots.get(kind.key) !== slot || slot.kind.version !== kind.version || slot.ready.length >= slot.kind.size
          ) {
            yield* Effect.ignore(driver.destroy(id))
          } else slot.ready.push(id)
          return made
        })
      )
    const maker = (wanted: Queue.Queue<Wanted>) =>
      Effect.forever(
        Effect.gen(function*() {
          const { key, waitUntil } = yield* Queue.take(wanted)
          // A template's boot waits for the hand-outs to pause (`REFILL_DELAY_MS`), at most until
          // `waitUntil`. Items are in the order asked, each bound the same: waiting for this one
          // holds none that was due sooner.
          if (key !== BASE_POOL) {
            for (;;) {
              const pause = Math.min(lastHandOut + refillDelayMs, waitUntil) - Date.now()
              if (pause <= 0) break
              yield* Effect.sleep(Duration.millis(pause))
            }
          }
          const slot = slots.get(key)
          if (slot === undefined) return
          slot.wanted = Math.max(0, slot.wanted - 1)
          if (slot.ready.length + slot.making >= slot.kind.size) return
          const made = yield* makeEntry(slot)
          if (made._tag === "Failure") {
            yield* Effect.logWarning("agent: could not make a warm pool entry", {
              pool: key,
              error: String(made.failure)
            })
            yield* Effect.sleep(Duration.seconds(1))
            // The slot is still empty: try again (if the pool still wants it).
            if (slots.get(key) === slot) want(slot, 1)
          }
        })
      )
    // Registered first so it runs last: after the makers (and the entries they are making,
    // uninterruptibly) ended, every entry is in a slot.
    yield* Effect.addFinalizer(() => destroyAll([...slots.values()].flatMap((slot) => slot.ready.splice(0))))
    // One fiber for all makers: closing the scope interrupts them together, so none starts
    // another entry while the others are being stopped.
    const makers = [
      ...Array.from({ length: size > 0 ? poolMakers(size) : 0 }, () => maker(wantedBase)),
      ...Array.from({ length: TEMPLATE_MAKERS }, () => maker(wantedTemplates))
    ]
    yield* Effect.forkScoped(Effect.all(makers, { concurrency: "unbounded", discard: true }))

    /** Takes a ready entry of `slot` and gives it the spec's identity; undefined when none or it failed. */
    const take = (slot: Slot, spec: SandboxSpec) =>
      Effect.suspend(() => {
        const poolId = slot.ready.shift()
        if (poolId === undefined) return Effect.succeed(undefined)
        lastHandOut = Date.now()
        return Effect.gen(function*() {
          const adopted = yield* Effect.result(
            limited(driver.adopt(poolId, spec), Effect.ignore(driver.destroy(spec.sandboxId)))
          )
          if (adopted._tag === "Success") return adopted.success
          yield* Effect.logWarning("agent: a warm pool entry could not be used", {
            sandboxId: spec.sandboxId,
            poolId,
            error: describeDriverError(adopted.failure)
          })
          yield* Effect.ignore(driver.destroy(poolId))
          return undefined
        }).pipe(Effect.ensuring(Effect.sync(() => {
          if (slots.get(slot.kind.key) === slot) want(slot, 1)
        })))
      })

    /**
     * Gives a ready entry the spec's identity: the template's pool's when `templateId` has one
     * that fits (`booted`), else `base`'s when the spec is `pooled`. Uninterruptible from the
     * take on: a taken entry is adopted or destroyed, never dropped where the stop's finalizer
     * (which sees only the slots) would miss it. Its slot is refilled once the adoption is over,
     * so that the new entry's process starts do not compete with it.
     */
    const adopt = (spec: SandboxSpec, templateId: string | undefined) =>
      Effect.uninterruptible(Effect.gen(function*() {
        // A fork starts from its source's files, which no entry has.
        if (spec.forkOf !== undefined) return undefined
        const own = templateId === undefined ? undefined : slots.get(templateId)
        if (own !== undefined && own.kind.image !== undefined && fitsTemplate(own.kind.image, spec)) {
          const info = yield* take(own, spec)
          if (info !== undefined) return { info, booted: true }
        }
        const base = slots.get(BASE_POOL)!
        if (!pooled(spec)) return undefined
        const info = yield* take(base, spec)
        return info === undefined ? undefined : { info, booted: false }
      }))

    /** Asks for every slot, once: after reconcile (which destroys what is not journaled). */
    const fill = Effect.sync(() => {
      if (filled) return
      filled = true
      for (const slot of slots.values()) want(slot, slot.kind.size - slot.ready.length - slot.making - slot.wanted)
    })

    /**
     * Sets a template's pool: made if new, drained if its version changed, trimmed or grown to
     * `size` (0 drains it). The destroyed entries are gone when this ends.
     */
    const setTemplate = (
      templateId: string,
      pool: { readonly size: number; readonly version: string; readonly image: TemplateImage }
    ) =>
      Effect.suspend(() => {
        const kind: Kind = {
          key: templateId,
          size: pool.size,
          version: pool.version,
          spec: templateEntrySpec(pool.image),
          image: pool.image
        }
        let slot = slots.get(templateId)
        const drained: Array<string> = []
        if (slot === undefined) {
          slot = { kind, ready: [], making: 0, wanted: 0 }
          slots.set(templateId, slot)
        } else {
          if (slot.kind.version !== pool.version) drained.push(...slot.ready.splice(0))
          slot.kind = kind
        }
        if (slot.ready.length > pool.size) drained.push(...slot.ready.splice(pool.size))
        if (filled) want(slot, pool.size - slot.ready.length - slot.making - slot.wanted)
        return destroyAll(drained)
      })

    /** Removes a template's pool: its ready entries are destroyed, those being made when done. */
    const removeTemplate = (templateId: string) =>
      Effect.suspend(() => {
        const slot = slots.get(templateId)
        if (slot === undefined) return Effect.void
        slots.delete(templateId)
        return destroyAll(slot.ready.splice(0))
      })

    const status = Effect.sync((): PoolStatus => {
      const base = slots.get(BASE_POOL)!
      const templates: Record<string, { size: number; ready: ReadonlyArray<string>; making: number }> = {}
      for (const [key, slot] of slots) {
        if (key !== BASE_POOL) templates[key] = { size: slot.kind.size, ready: [...slot.ready], making: slot.making }
      }
      return { ready: [...base.ready], making: base.making, templates }
    })

    return { status, adopt, fill, setTemplate, removeTemplate }
  })
