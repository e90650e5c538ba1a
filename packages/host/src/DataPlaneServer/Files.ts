/**
 * The data plane's file management endpoints (`AgentFilesApi` of `@svc/host-protocol/DataPlane`)
 * over the driver: an entry's stat, a folder made, an entry moved or removed. Each is one short
 * script inside the sandbox (`Driver/Files.ts`), no transfer: no transfer slot is taken.
 */
import {
  AgentApi,
  AgentConflict,
  AgentFailed,
  type AgentFileInfo,
  type AgentInvalid,
  type AgentNotFound,
  type AgentNotRunning,
  type AgentRefused
} from "@svc/host-protocol/DataPlane"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { viaDriver } from "../DataPlaneServer.ts"
import { type FileInfo, SandboxDriver, type SandboxDriverError } from "../Driver.ts"

type FileOpError = AgentInvalid | AgentNotFound | AgentNotRunning | AgentConflict | AgentRefused | AgentFailed

/** A driver call of a file endpoint: `conflict` is 409; a transfer's refusals cannot happen here. */
const viaDriverF = <A, R>(effect: Effect.Effect<A, SandboxDriverError, R>): Effect.Effect<A, FileOpError, R> =>
  Effect.catch(effect, (error) =>
    error._tag === "SandboxFileError" && error.reason === "conflict"
      ? Effect.fail(new AgentConflict({ error: `${error.path}: something is in the way` }))
      : viaDriver(Effect.fail(error)).pipe(
        Effect.mapError((e): FileOpError =>
          e._tag === "AgentTooLarge" || e._tag === "AgentInsufficientStorage" || e._tag === "AgentBusy" || e._tag === "AgentRateLimited"
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
    return handlers
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
