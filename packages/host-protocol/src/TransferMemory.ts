/**
 * How the processes a transfer's bytes pass through (the API's files routes, the agent's data
 * plane) let V8 collect them. Every byte passes as a Buffer of up to 64 KiB read from a socket or
 * a pipe: memory outside V8's heap, garbage as soon as it was written on. By default V8 starts a
 * full mark of the whole heap each time 64 MiB more of that memory was allocated: in a process
 * whose heap holds 100-200 MiB of live objects (the API, the agent), about 16 full marks per GiB
 * per hop, which were most of the 2.5-7 CPU-seconds per GiB each of them spent on a transfer
 * (bench/README.md: a loopback upload of 1 GiB into a pipe, client and server in one process, took
 * 1.3-1.6 CPU-s bare, 5.7-8.9 with 150 MiB of live objects, 1.1-1.4 with the flag below).
 *
 * So that memory counts towards the heap's own limit instead
 * (`--external-memory-accounted-in-global-limit`, a V8 flag, which NODE_OPTIONS does not accept:
 * set at run time, V8 reads it at each collection), and the Buffers are freed by a young
 * collection (a scavenge: it visits only the young objects, about a millisecond) once 32 MiB more
 * of them were allocated, checked every 25 ms: without it they waited for the young generation to
 * fill, and 100 transfers at once held 260 MiB of them (apps/api/test/transfers/Transfers.test.ts);
 * a full collection once 128 MiB more of them are still held after a young one (promoted).
 * The check runs only while a transfer is in flight (`hold`, `inFlight`): a process that moves
 * no file has no timer waking it 40 times a second.
 * The collector is taken from a context of its own (`vm`) with `--expose-gc` on for that moment
 * only: no `gc` global appears in this process.
 */
import { Effect, type Scope } from "effect"
import * as V8 from "node:v8"
import * as Vm from "node:vm"

/** Buffers allocated past the last reading after a young collection before the next one. */
const YOUNG_COLLECTION_BYTES = 32 * 1024 * 1024
const CHECK_MS = 25
/** Buffers still held after a young collection, past the last full one's reading, before a full one. */
const FULL_COLLECTION_BYTES = 128 * 1024 * 1024

let set = false
/** The collector, once the flag is set on a V8 that has it. */
let collect: ((options: { readonly type: "minor" | "major" }) => void) | undefined
/** Transfers in flight now (`hold`). */
let held = 0
let timer: ReturnType<typeof setInterval> | undefined

/** Sets the flag for this process (once; every later call does nothing); the check runs while a transfer is held. */
export const accountExternalMemoryInHeapLimit: Effect.Effect<void> = Effect.sync(() => {
  if (set) return
  set = true
  V8.setFlagsFromString("--external-memory-accounted-in-global-limit")
  V8.setFlagsFromString("--expose-gc")
  const gc: unknown = Vm.runInNewContext("typeof gc === 'function' ? gc : undefined")
  V8.setFlagsFromString("--no-expose-gc")
  // A runtime whose V8 ignores the flag leaves the collections to V8 itself (no check at all).
  if (typeof gc !== "function") return
  collect = gc as typeof collect
  if (held > 0) start()
})

const start = () => {
  const gc = collect
  if (gc === undefined || timer !== undefined) return
  // Counted from the transfers' start: what was allocated while none ran is not theirs to free.
  let floor = process.memoryUsage().arrayBuffers
  let floorAfterFull = floor
  let afterYoung = false
  timer = setInterval(() => {
    // Read a tick after a collection: V8 frees the Buffers' memory after it, concurrently.
    const now = process.memoryUsage().arrayBuffers
    if (afterYoung) {
      afterYoung = false
      // Buffers that lived long enough to be promoted (held in a stream's queue) are freed by a
      // full collection only: one once that much more of them is still held after a young one.
      if (now > floorAfterFull + FULL_COLLECTION_BYTES) {
        gc({ type: "major" })
        floor = floorAfterFull = now
        return
      }
    }
    if (now < floor) floor = now
    if (now < floorAfterFull) floorAfterFull = now
    if (now > floor + YOUNG_COLLECTION_BYTES) {
      gc({ type: "minor" })
      floor = now
      afterYoung = true
    }
  }, CHECK_MS).unref()
}

/**
 * One transfer in flight until the returned release is called (a second call does nothing):
 * the first one held starts the check, the last one released stops it.
 */
export const hold = (): () => void => {
  held += 1
  if (held === 1) start()
  let released = false
  return () => {
    if (released) return
    released = true
    held -= 1
    if (held === 0 && timer !== undefined) {
      clearInterval(timer)
      timer = undefined
    }
  }
}

/** One transfer in flight for the life of the scope; the release, to end it earlier. */
export const inFlight: Effect.Effect<() => void, never, Scope.Scope> = Effect.acquireRelease(
  Effect.sync(hold),
  (release) => Effect.sync(release)
)

/** Whether the check runs now (a transfer is held, on a V8 that has the flag). */
export const active = (): boolean => timer !== undefined

/** Transfers held now. */
export const inFlightCount = (): number => held
