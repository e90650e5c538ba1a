/**
 * A transfer's bytes moved by the kernel between a connection and a sandbox's pipe (`splice`,
 * done by a child of the spawner: `Spawner.splice`), so that a large file never passes through
 * the agent's event loop: each 64 KiB chunk read into a Buffer and written out again cost the
 * agent 2.8-3.8 CPU-seconds per GiB (bench/README.md, 2026-11-28 11:04), on the cores the sandbox and the API also need.
 *
 * Node's own socket objects stay the owners of the descriptors: `descriptorOf` and
 * `stopReading` (@svc/host-protocol/Handoff) take a socket's descriptor out of Node's polling
 * and hand back what Node had already read ahead.
 */
import { descriptorOf, written } from "@svc/host-protocol/Handoff"
import { Effect, Schema } from "effect"
import type { Writable } from "node:stream"
import type { SplicedBody } from "../Driver.ts"
import type { PumpResult } from "./Process.ts"
import * as Spawner from "./Spawner.ts"

/** errno values the spawner reports for a failed splice. */
export const EPIPE = 32
export const ECONNRESET = 104
export const ETIMEDOUT = 110

/** The splice ended before the source's end: `errno` says which side (EPIPE: the reader went). */
export class SpliceFailed extends Schema.TaggedError<SpliceFailed>()("SpliceFailed", {
  errno: Schema.Number,
  message: Schema.String
}) {}

/** Writes `chunks` and waits until Node handed them to the kernel (nothing of them left queued). */
export const writeAll = (writable: Writable, chunks: ReadonlyArray<Uint8Array>): Effect.Effect<void, SpliceFailed> =>
  chunks.length === 0 ? Effect.void : Effect.tryPromise({
    try: () => written(writable, chunks),
    catch: (error) =>
      new SpliceFailed({ errno: EPIPE, message: `writing ahead: ${error instanceof Error ? error.message : error}` })
  })

/**
 * Moves bytes from descriptor `from` to `to` until end of file on `from` (see
 * `Spawner.splice`); the bytes moved. Interrupted: the splice is killed.
 */
export const spliceFds = (from: number, to: number, idleMs: number): Effect.Effect<number, SpliceFailed> =>
  Effect.tryPromise({
    try: (signal) => Spawner.splice(from, to, idleMs, signal),
    catch: (e) =>
      new SpliceFailed({
        errno: e instanceof Spawner.SpawnFailed ? e.errno : 0,
        message: e instanceof Error ? e.message : String(e)
      })
  })

/**
 * An upload's `SplicedBody` into the sandbox's pipe `stdin`: begun (the connection answered),
 * what Node had read ahead written first, then the rest spliced until the connection's end.
 * The reader going away (EPIPE), or the spawner with the splice (no errno), is `readerGone`, as
 * `pump`'s (the writer's exit code says why); a failure of the connection (reset, idle) is the
 * body's `cut`.
 */
export const spliceInto = <E>(body: SplicedBody<E>, stdin: Writable): Effect.Effect<PumpResult, E> =>
  Effect.gen(function*() {
    const from = descriptorOf(body.socket)
    const to = descriptorOf(stdin)
    if (from === undefined || to === undefined) {
      return yield* Effect.fail(body.cut(from === undefined ? "the connection is closed" : "the pipe is closed"))
    }
    const ahead = yield* body.begin
    const aheadBytes = ahead.reduce((n, chunk) => n + chunk.length, 0)
    return yield* writeAll(stdin, ahead).pipe(
      Effect.andThen(spliceFds(from, to, body.idleMs)),
      Effect.map((moved): PumpResult => ({ bytes: aheadBytes + moved, overLimit: false, readerGone: false })),
      Effect.catch((e) =>
        e.errno === EPIPE || e.errno === 0
          ? Effect.succeed<PumpResult>({ bytes: aheadBytes, overLimit: false, readerGone: true })
          : Effect.fail(body.cut(e))
      )
    )
  })
