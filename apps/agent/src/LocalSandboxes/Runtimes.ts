/**
 * A template sandbox's start and ready commands, kept by the agent (`agent/runtime/<id>.json`)
 * from its create for each later start.
 */
import { Effect, Schema } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"

const RuntimeJson = Schema.fromJsonString(Schema.Struct({
  startCmd: Schema.NullOr(Schema.String),
  readyCmd: Schema.NullOr(Schema.String)
}))

export interface Runtime {
  readonly startCmd: string | null
  readonly readyCmd: string | null
}

export const makeRuntimes = (dataDir: string) => {
  const dir = NodePath.join(dataDir, "agent", "runtime")
  const file = (sandboxId: string) => NodePath.join(dir, `${sandboxId}.json`)
  return {
    save: (sandboxId: string, runtime: Runtime) =>
      Effect.promise(async () => {
        await Fs.mkdir(dir, { recursive: true, mode: 0o700 })
        await Fs.writeFile(file(sandboxId), Schema.encodeSync(RuntimeJson)(runtime), { mode: 0o600 })
      }),
    // Read at every cold boot, absent for most: synchronously, as the journal (a small file, no thread-pool hop).
    load: (sandboxId: string) =>
      Effect.sync((): Runtime | undefined => {
        let text: string
        try {
          text = FsSync.readFileSync(file(sandboxId), "utf8")
        } catch {
          return undefined
        }
        return Schema.decodeUnknownSync(RuntimeJson)(text)
      }),
    remove: (sandboxId: string) => Effect.promise(() => Fs.rm(file(sandboxId), { force: true }))
  }
}

export type Runtimes = ReturnType<typeof makeRuntimes>
