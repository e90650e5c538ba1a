/**
 * The data plane's file management endpoints (`AgentFilesApi` of `@svc/host-protocol/DataPlane`)
 * over the driver: an entry's stat, a folder made, an entry moved or removed. Each is one short
 * script inside the sandbox (`Driver/Files.ts`), no transfer: no transfer slot is taken.
 */
import {
  AgentApi,
  AgentBusy,
  AgentConflict,
  AgentFailed,
  type AgentFileInfo,
  type AgentInvalid,
  type AgentNotFound,
  type AgentNotRunning,
  type AgentRefused,
  type AgentWatchEvent
} from "@svc/host-protocol/DataPlane"
import * as Sse from "@svc/host-protocol/Sse"
import { Effect, Stream } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { viaDriver } from "../DataPlaneServer.ts"
import { type FileInfo, type FileWatchEvent, SandboxDriver, type SandboxDriverError } from "../Driver.ts"

/** Watchers one sandbox has open on this host at once; one more is 503 `busy`. */
export const MAX_WATCHERS_PER_SANDBOX = 16

const toWatchEvent = (e: FileWatchEvent): AgentWatchEvent => ({
  event: e.type,
  data: JSON.stringify({ type: e.type, path: e.path, is_dir: e.isDir, ...(e.from !== null ? { from: e.from } : {}) })
})

type FileOpError = AgentInvalid | AgentNotFound | AgentNotRunning | AgentConflict | AgentRefused | AgentFailed

/** A driver call of a file endpoint: `conflict` is 409; a transfer's refusals cannot happen here. */
const viaDriverF = <A, R>(effect: Effect.Effect<A, SandboxDriverError, R>): Effect.Effect<A, FileOpError, R> =>
  Effect.catch(effect, (error) =>
    error._tag === "SandboxFileError" && error.reason === "conflict"
      ? Effect.fail(new AgentConflict({ error: `${error.path}: something is in the way` }))
      : viaDriver(Effect.fail(error)).pipe(
        Effect.mapError((e): FileOpError =>
          e._tag === "AgentTooLarge" || e._tag === "AgentInsufficientStorage" || e._tag === "AgentBusy" ||
            e._tag === "AgentRateLimited"
            ? new AgentFailed({ error: e.error })
            : e
        )
      ))

const toWire = (info: FileInfo): AgentFileInfo => ({
  name: info.name,
  path: info.path,
  type: info.type,
  size: info.size,
  mode: info.mode,
  uid: info.uid,
  gid: info.gid,
  mtime: info.mtime,
  target: info.target
})

export const FileHandlers = HttpApiBuilder.group(
  AgentApi,
  "files",
  Effect.fn(function*(handlers) {
    const driver = yield* SandboxDriver
    /** Watchers each sandbox has open now (none: no entry). */
    const watchers = new Map<string, number>()
    const watcherSlot = (sandboxId: string) =>
      Effect.acquireRelease(
        Effect.suspend(() => {
          const n = watchers.get(sandboxId) ?? 0
          if (n >= MAX_WATCHERS_PER_SANDBOX) {
            return Effect.fail(
              new AgentBusy({ error: `the sandbox has ${MAX_WATCHERS_PER_SANDBOX} watchers open on this host` })
            )
          }
          watchers.set(sandboxId, n + 1)
          return Effect.void
        }),
        () =>
          Effect.sync(() => {
            const n = (watchers.get(sandboxId) ?? 1) - 1
            if (n === 0) watchers.delete(sandboxId)
            else watchers.set(sandboxId, n)
          })
      )
    return handlers
      .handle("watch", ({ params, query }) =>
        Effect.gen(function*() {
          yield* watcherSlot(params.id)
          const events = yield* viaDriverF(
            driver.watch(params.id, query.path, { recursive: query.recursive !== "false" })
          )
          return Sse.response(Stream.map(events, toWatchEvent))
        }))
      .handle("stat", ({ params, query }) => Effect.map(viaDriverF(driver.fileInfo(params.id, query.path)), toWire))
      .handle("mkdir", ({ params, payload }) =>
        Effect.map(
          viaDriverF(driver.makeDir(params.id, payload.path, { parents: payload.parents, mode: payload.mode })),
          ({ created, info }) => ({ created, info: toWire(info) })
        ))
      .handle("move", ({ params, payload }) =>
        Effect.map(
          viaDriverF(driver.move(params.id, payload.from, payload.to, { overwrite: payload.overwrite })),
          toWire
        ))
      .handle(
        "remove",
        ({ params, payload }) => viaDriverF(driver.remove(params.id, payload.path, { recursive: payload.recursive }))
      )
  })
)
