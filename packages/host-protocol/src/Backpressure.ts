/**
 * Writing a stream's chunks to a Node writable (an HTTP request or response) at the pace the
 * other end reads: a transfer holds one chunk in memory, never the file (the agent's and the
 * API's data planes both use it).
 */
import { Effect } from "effect"

interface Writable {
  readonly destroyed: boolean
  write(chunk: Uint8Array): boolean
  once(event: "drain" | "close", listener: () => void): unknown
  off(event: "drain" | "close", listener: () => void): unknown
}

/** Writes one chunk; resumes once the writable wants more (or has gone: the caller sees it closed). */
export const writeChunk = (writable: Writable, chunk: Uint8Array): Effect.Effect<void> =>
  Effect.callback<void>((resume) => {
    if (writable.destroyed || writable.write(chunk)) return resume(Effect.void)
    const done = () => {
      writable.off("drain", done)
      writable.off("close", done)
      resume(Effect.void)
    }
    writable.once("drain", done)
    writable.once("close", done)
    return Effect.sync(() => {
      writable.off("drain", done)
      writable.off("close", done)
    })
  })
