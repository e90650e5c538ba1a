/**
 * The warm pool: `base` sandboxes made ahead, so that a create of a pooled kind (`pooled`) takes
 * one and gives it the new sandbox's identity instead of cold-booting.
 *
 * Entries are driver sandboxes named `pool-<hex>` (platform ids are `sbx_...`, so the two never
 * meet). They have no journal entry: a restarted agent's reconcile destroys them as orphans and
 * the pool is made again; a graceful stop destroys them.
 *
 * Each missing entry is one item in `wanted`: one per slot once reconcile has run (`fill`;
 * before, reconcile would destroy entries as orphans), one more for each entry taken.
 * `poolMakers` fibers take items and make entries, so ready + being made + wanted is always the
 * pool's size: refills run side by side and never overshoot. A create never waits for them: it
 * takes a ready entry or cold-boots.
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
 * Whether a sandbox can be a pool entry: only `base` sandboxes of the entries' disk size. A pool
 * entry runs already: volumes are mounted as a sandbox starts, so those cold-boot.
 */
export const pooled = (spec: SandboxSpec): boolean =>
  spec.template === BASE_TEMPLATE && spec.layers === undefined && spec.diskGb === POOL_DISK_GB &&
  (spec.volumes ?? []).length === 0

export interface PoolStatus {
  readonly ready: ReadonlyArray<string>
  readonly making: number
}

/**
 * How many pool entries are made at once. Making one is CPU work (process starts, namespaces,
 * cgroup and veth writes: ~60 ms of it here), so one core is left to the creates being served:
 * on a 2-core host two makers kept the pool full but raised create → running p50 by ~5 ms
 * (bench/sandboxes.ts, six alternating runs), so there it is one; bigger hosts refill side by
 * side. Never more than the pool's size.
 */
export const poolMakers = (poolSize: number) => Math.max(1, Math.min(poolSize, Os.availableParallelism() - 1))

export interface PoolOptions {
  readonly size: number
  readonly driver: SandboxDriver["Service"]
  /** Whether a sandbox answers an exec (`Readiness.ts`). */
  readonly probe: (sandboxId: string) => Effect.Effect<boolean>
  /** A create or start checked for the host's limits, undone without them (`LocalSandboxes.ts`). */
  readonly limited: <E>(
    started: Effect.Effect<SandboxInfo, E>,
    undo: Effect.Effect<void>
  ) => Effect.Effect<SandboxInfo, E | DriverFailure>
}

/** The pool, its makers forked in the scope (which destroys its entries when it closes). */
export const makePool = (options: PoolOptions) =>
  Effect.gen(function*() {
    const { driver, limited, probe, size } = options
    const pool: Array<string> = []
    let making = 0
    let filled = false
    const wanted = yield* Queue.unbounded<void>()
    // Uninterruptible from its start to `pool.push`: an entry made is always either in `pool`
    // (where the finalizer finds it) or destroyed.
    const makeEntry = Effect.uninterruptible(
      Effect.gen(function*() {
        const id = `${POOL_PREFIX}${randomBytes(8).toString("hex")}`
        making++
        const made = yield* Effect.result(
          Effect.gen(function*() {
            yield* driver.create(poolEntrySpec(id))
            if (!(yield* probe(id))) return yield* Effect.fail("the pool entry did not answer")
          }).pipe(
            // A create that failed half-way can leave a folder behind: nothing of it may stay.
            Effect.onError(() => Effect.ignore(driver.destroy(id)))
          )
        )
        // In one step: the status never counts the entry twice or not at all.
        making--
        if (made._tag === "Success") pool.push(id)
        return made
      })
    )
    const maker = Effect.forever(
      Effect.gen(function*() {
        yield* Queue.take(wanted)
        const made = yield* makeEntry
        if (made._tag === "Failure") {
          yield* Effect.logWarning("agent: could not make a warm pool entry", { error: String(made.failure) })
          yield* Effect.sleep(Duration.seconds(1))
          // The slot is still empty: try again.
          Queue.offerUnsafe(wanted, undefined)
        }
      })
    )
    if (size > 0) {
      // Registered first so it runs last: after the makers (and the entries they are making,
      // uninterruptibly) ended, every entry is in `pool`.
      yield* Effect.addFinalizer(() =>
        Effect.forEach(pool.splice(0), (id) => Effect.ignore(driver.destroy(id)), { concurrency: 4, discard: true })
      )
      // One fiber for all makers: closing the scope interrupts them together, so none starts
      // another entry while the others are being stopped.
      const makers = poolMakers(size)
      yield* Effect.forkScoped(
        Effect.forEach(Array.from({ length: makers }), () => maker, { concurrency: makers, discard: true })
      )
    }
    /**
     * Gives a ready entry the spec's identity, if the spec is `pooled` and there is one.
     * Uninterruptible from the take on: a taken entry is adopted or destroyed, never dropped
     * where the stop's finalizer (which sees only the pool) would miss it. Its slot is refilled
     * once the adoption is over, so that the new entry's process starts do not compete with it.
     */
    const adopt = (spec: SandboxSpec) =>
      Effect.uninterruptible(Effect.suspend(() => {
        const poolId = pooled(spec) ? pool.shift() : undefined
        if (poolId === undefined) return Effect.succeed(undefined)
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
        }).pipe(Effect.ensuring(Effect.sync(() => Queue.offerUnsafe(wanted, undefined))))
      }))
    /** Asks for every slot, once: after reconcile (which destroys what is not journaled). */
    const fill = Effect.sync(() => {
      if (filled) return
      filled = true
      for (let i = 0; i < size; i++) Queue.offerUnsafe(wanted, undefined)
    })
    return {
      status: Effect.sync((): PoolStatus => ({ ready: [...pool], making })),
      adopt,
      fill
    }
  })
