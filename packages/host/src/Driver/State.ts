/**
 * Per-sandbox files under `<dataDir>/sandboxes/<id>/`: what a fresh agent process needs to find,
 * reach and clean up the sandboxes a previous process made.
 *
 *   sandbox.json  the spec (its env sealed), template folder, internalIp (written at create,
 *                 kept until destroy)
 *   run.json      the running instance: init pid and its start time (removed by stop)
 *   upper/ work/  the overlay's writable layer and its scratch folder (the saved file system)
 * (The overlay's mount point is `<runDir>/hosts/<data dir digest>/roots/<id>`, see Host.ts: mounted
 * only inside the sandbox's private mount namespace, where unprivileged bubblewrap can walk to it.)
 *   bwrap.log     the start's output (svc-start, bubblewrap; its last 16 KiB), written by the agent
 *   status.json   bubblewrap's `--json-status-fd` output for the current run: the init's
 *                 `exit-code` once it ended (written by the host-side bubblewrap, never from inside)
 *   ended.json    how the last run ended when it ended on its own (`SandboxExit`; until the next
 *                 start or stop)
 *
 * The env may hold credentials: `sandbox.json` holds it only sealed (SecretBox, bound to the
 * sandbox id, see `SealedEnv.ts`). `SandboxRecord` is the record in memory, its env opened;
 * `StoredSandboxRecord` is the file. `list` and `destroy` read the file without opening the
 * env, so a sandbox whose env no longer opens (its key removed from `SVC_ENCRYPTION_KEYS`) is
 * still listed and can be destroyed; start, stop and exec need it opened.
 */
import { openEnv, sealEnv } from "@svc/crypto/SealedEnv"
import type { SecretBox } from "@svc/crypto/SecretBox"
import { VolumeMount } from "@svc/host-protocol/Volumes"
import { Effect, Schema } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { DriverFailure, Env, LimitStatus, SandboxExit } from "../Driver.ts"

const recordFields = {
  sandboxId: Schema.String,
  hostId: Schema.String,
  template: Schema.String,
  templateDir: Schema.String,
  cpu: Schema.Int,
  ramMb: Schema.Int,
  diskGb: Schema.Int,
  exposedPorts: Schema.Array(Schema.Int),
  internalIp: Schema.String,
  createdAt: Schema.String,
  /** Mounted at each start (`Volumes.ts`); absent in records of sandboxes without volumes. */
  volumes: Schema.optionalKey(Schema.Array(VolumeMount)),
  /**
   * Its uid range's slot (`Confinement.slotUid`), leased machine-wide until it is destroyed;
   * absent in records made before sandboxes had ranges of their own (leased at their next start).
   */
  uidSlot: Schema.optionalKey(Schema.Int),
  /** An exec's cwd and user when it names none (an image's `WorkingDir` and `User`). */
  workdir: Schema.optionalKey(Schema.String),
  user: Schema.optionalKey(Schema.String)
}

/** A sandbox's record in memory: `env` in the clear, never written as such. */
export class SandboxRecord extends Schema.Class<SandboxRecord>("@svc/host/Driver/SandboxRecord")({
  ...recordFields,
  env: Env
}) {}

/** `sandbox.json` as stored: the env sealed for the `host`. */
export class StoredSandboxRecord extends Schema.Class<StoredSandboxRecord>("@svc/host/Driver/StoredSandboxRecord")({
  ...recordFields,
  sealedEnv: Schema.String
}) {}

export class RunRecord extends Schema.Class<RunRecord>("@svc/host/Driver/RunRecord")({
  /** The sandbox's init (pid 1 inside) as seen from the host. */
  pid: Schema.Int,
  /** Its start time in clock ticks since boot (/proc/<pid>/stat field 22): guards against pid reuse. */
  startTicks: Schema.Int,
  startedAt: Schema.String,
  limits: LimitStatus,
  /**
   * The host-side bubblewrap that waits for the sandbox (it exits, after writing the init's exit
   * status, as soon as the init ends) and its start time. Absent in records of older runs.
   */
  monitorPid: Schema.optionalKey(Schema.Int),
  monitorStartTicks: Schema.optionalKey(Schema.Int)
}) {}

const StoredRecordJson = Schema.fromJsonString(StoredSandboxRecord)
const RunRecordJson = Schema.fromJsonString(RunRecord)
const ExitJson = Schema.fromJsonString(SandboxExit)

export interface SandboxPaths {
  readonly dir: string
  readonly record: string
  readonly run: string
  readonly upper: string
  readonly work: string
  readonly log: string
  readonly status: string
  readonly ended: string
}

export const sandboxPaths = (dataDir: string, sandboxId: string): SandboxPaths => {
  const dir = NodePath.join(dataDir, "sandboxes", sandboxId)
  return {
    dir,
    record: NodePath.join(dir, "sandbox.json"),
    run: NodePath.join(dir, "run.json"),
    upper: NodePath.join(dir, "upper"),
    work: NodePath.join(dir, "work"),
    log: NodePath.join(dir, "bwrap.log"),
    status: NodePath.join(dir, "status.json"),
    ended: NodePath.join(dir, "ended.json")
  }
}

/**
 * Writes via a temporary file and rename, so a crash never leaves half a record. Synchronous: a
 * record is under a kilobyte into the page cache and a rename, never an fsync, so neither waits
 * on the disk; through the thread pool the same took four hops (open, write, close, rename), a
 * millisecond or more of a create's or an adopt's time on a busy host.
 */
const writeAtomic = async (file: string, text: string) => {
  const temp = `${file}.tmp-${process.pid}`
  FsSync.writeFileSync(temp, text, { mode: 0o600 })
  FsSync.renameSync(temp, file)
}

/** Seals the record's env and writes `sandbox.json`. */
export const writeSandboxRecord = (
  paths: SandboxPaths,
  record: SandboxRecord,
  box: SecretBox["Service"],
  operation: string
): Effect.Effect<void, DriverFailure> =>
  Effect.gen(function*() {
    const { env, ...fields } = record
    const stored = new StoredSandboxRecord({ ...fields, sealedEnv: yield* sealEnv(box, "host", record.sandboxId, env) })
    yield* Effect.tryPromise({
      try: () => writeAtomic(paths.record, Schema.encodeSync(StoredRecordJson)(stored)),
      catch: (e) => new DriverFailure({ operation, message: e instanceof Error ? e.message : String(e) })
    })
  })

export const writeRunRecord = (paths: SandboxPaths, record: RunRecord) =>
  writeAtomic(paths.run, Schema.encodeSync(RunRecordJson)(record))

/** Reads a record synchronously (a small file in the page cache, as `writeAtomic` writes them). */
const readDecoded = async <A>(file: string, decode: (text: string) => A): Promise<A | undefined> => {
  let text: string
  try {
    text = FsSync.readFileSync(file, "utf8")
  } catch {
    return undefined
  }
  try {
    return decode(text)
  } catch {
    // A damaged file counts as absent; the sandbox is then stopped or unknown.
    return undefined
  }
}

/**
 * A `sandbox.json` written before the env was sealed (its `env` in the clear) is rewritten
 * sealed; the driver does this for every sandbox when it starts, so none is left on the host.
 */
const LegacyRecordJson = Schema.fromJsonString(SandboxRecord)

export const sealLegacyRecord = (
  paths: SandboxPaths,
  box: SecretBox["Service"]
): Effect.Effect<boolean, DriverFailure> =>
  Effect.gen(function*() {
    const legacy = yield* Effect.tryPromise({
      try: async () => ((await readStoredRecord(paths)) === undefined
        ? readDecoded(paths.record, Schema.decodeUnknownSync(LegacyRecordJson))
        : undefined),
      catch: (e) => new DriverFailure({ operation: "init", message: e instanceof Error ? e.message : String(e) })
    })
    if (legacy === undefined) return false
    yield* writeSandboxRecord(paths, legacy, box, "init")
    return true
  })

/** `sandbox.json` without opening its env (list, destroy, an existence check). */
export const readStoredRecord = (paths: SandboxPaths) =>
  readDecoded(paths.record, Schema.decodeUnknownSync(StoredRecordJson))

/**
 * `sandbox.json` with its env opened, or undefined when there is none. An env that does not
 * open is the host's failure (a removed key, a file edited behind the driver's back).
 */
export const readSandboxRecord = (
  paths: SandboxPaths,
  box: SecretBox["Service"],
  operation: string
): Effect.Effect<SandboxRecord | undefined, DriverFailure> =>
  Effect.gen(function*() {
    const stored = yield* Effect.tryPromise({
      try: () => readStoredRecord(paths),
      catch: (e) => new DriverFailure({ operation, message: e instanceof Error ? e.message : String(e) })
    })
    if (stored === undefined) return undefined
    const { sealedEnv, ...fields } = stored
    const env = yield* openEnv(box, "host", stored.sandboxId, sealedEnv).pipe(
      Effect.mapError((e) => new DriverFailure({ operation, message: `${paths.record}: ${e.message}` }))
    )
    return new SandboxRecord({ ...fields, env })
  })

export const readRunRecord = (paths: SandboxPaths) => readDecoded(paths.run, Schema.decodeUnknownSync(RunRecordJson))

export const writeExit = (paths: SandboxPaths, exit: SandboxExit) =>
  writeAtomic(paths.ended, Schema.encodeSync(ExitJson)(exit))

export const readExit = (paths: SandboxPaths) => readDecoded(paths.ended, Schema.decodeUnknownSync(ExitJson))

/** The init's exit status from bubblewrap's JSON status documents (`{"exit-code": N}`), if it ended. */
export const readExitCode = async (paths: SandboxPaths): Promise<number | undefined> => {
  const text = await Fs.readFile(paths.status, "utf8").catch(() => "")
  const match = /"exit-code"\s*:\s*(\d+)/.exec(text)
  return match ? Number(match[1]) : undefined
}

/**
 * State letter and start time of a process, or undefined when there is no such process. /proc
 * is read synchronously: it never waits on a disk, and a read costs a few microseconds, less
 * than the thread pool's hop (a create and an exec each check two processes).
 */
export const procStatSync = (pid: number): { state: string; startTicks: number } | undefined => {
  let text: string
  try {
    text = FsSync.readFileSync(`/proc/${pid}/stat`, "utf8")
  } catch {
    return undefined
  }
  // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ")
  return { state: fields[0]!, startTicks: Number(fields[19]) }
}

export const procStat = async (pid: number) => procStatSync(pid)

const sameProcessSync = (pid: number, startTicks: number): boolean => {
  const stat = procStatSync(pid)
  return stat !== undefined && stat.startTicks === startTicks && stat.state !== "Z" && stat.state !== "X"
}

export const sameProcess = async (pid: number, startTicks: number): Promise<boolean> => sameProcessSync(pid, startTicks)

/**
 * True when the recorded run still runs: its pid 1 (same pid, same start time, not a zombie)
 * and, when recorded, the host-side bubblewrap that waits for it. That one exits as soon as the
 * init ends, also when pid 1 lingers for processes left inside; a sandbox without it is not
 * watched any more and counts as ended.
 */
export const isAliveSync = (run: RunRecord): boolean =>
  sameProcessSync(run.pid, run.startTicks) &&
  (run.monitorPid === undefined || sameProcessSync(run.monitorPid, run.monitorStartTicks ?? -1))

export const isAlive = async (run: RunRecord): Promise<boolean> => isAliveSync(run)

/** True when the run's pid 1 still runs (whatever became of the host-side bubblewrap). */
export const isInitAlive = (run: RunRecord): Promise<boolean> => sameProcess(run.pid, run.startTicks)
