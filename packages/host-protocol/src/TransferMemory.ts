/**
 * How the processes a transfer's bytes pass through (the API's files routes, the agent's data
 * plane) let V8 collect them. Every byte passes as a Buffer of up to 64 KiB read from a socket or
 * a pipe: memory outside V8's heap, garbage as soon as it was written on. By default V8 starts a
 * full mark of the whole heap each time 64 MiB more of that memory was allocated: in a process
 * whose heap holds 100-200 MiB of live objects (the API, the agent), about 16 full marks per GiB
 * per hop, which were most of the 2.5-7 CPU-seconds per GiB each of them spent on a transfer
 * (measured, bench/README.md: the same loopback upload into a pipe took 0.6 CPU-s/GiB in a bare
 * process and 5-8 with 150 MiB of live objects, 0.6 again with this flag). With
 * `--external-memory-accounted-in-global-limit` that memory counts towards the heap's own
 * limit instead, which grows with the heap: far fewer full marks, and the same peak resident
 * memory in that measurement (409 against 408 MiB). A V8 flag (not a Node option: not accepted in
 * NODE_OPTIONS), set at run time, which V8 reads at each collection.
 */
import { Effect } from "effect"
import * as V8 from "node:v8"

let set = false

/** Sets the flag for this process (once; every later call does nothing). */
export const accountExternalMemoryInHeapLimit: Effect.Effect<void> = Effect.sync(() => {
  if (set) return
  set = true
  V8.setFlagsFromString("--external-memory-accounted-in-global-limit")
})
