/**
 * Per-sandbox files under `<dataDir>/sandboxes/<id>/`: what a fresh agent process needs to find,
 * reach and clean up the sandboxes a previous process made.
 *
 *   sandbox.json  the spec, template folder, internalIp (written at create, kept until destroy)
 *   run.json      the running instance: init pid and its start time (removed by stop)
 *   upper/ work/  the overlay's writable layer and its scratch folder (the saved file system)
 *   root/         mount point of the overlay, mounted only inside the sandbox's private mount
 *                 namespace (the host's mount table never shows it)
 *   bwrap.log     bubblewrap's and the init's own output
 *   status.json   bubblewrap's `--json-status-fd` output for the current run: the init's
 *                 `exit-code` once it ended (written by the host-side bubblewrap, never from inside)
 *   ended.json    how the last run ended when it ended on its own (`SandboxExit`; until the next
 *                 start or stop)
 */
import { Schema } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { Env, LimitStatus, SandboxExit } from "../Driver.ts"

export class SandboxRecord extends Schema.Class<SandboxRecord>("@svc/sandboxes/Driver/SandboxRecord")({
  sandboxId: Schema.String,
  hostId: Schema.String,
  template: Schema.String,
  templateDir: Schema.String,
  env: Env,
  cpu: Schema.Int,
  ramMb: Schema.Int,
  diskGb: Schema.Int,
  exposedPorts: Schema.Array(Schema.Int),
  internalIp: Schema.String,
  createdAt: Schema.String
}) {}

export class RunRecord extends Schema.Class<RunRecord>("@svc/sandboxes/Driver/RunRecord")({
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

const SandboxRecordJson = Schema.fromJsonString(SandboxRecord)
const RunRecordJson = Schema.fromJsonString(RunRecord)
const ExitJson = Schema.fromJsonString(SandboxExit)

export interface SandboxPaths {
  readonly dir: string
  readonly record: string
  readonly run: string
  readonly upper: string
  readonly work: string
  readonly root: string
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
    root: NodePath.join(dir, "root"),
    log: NodePath.join(dir, "bwrap.log"),
    status: NodePath.join(dir, "status.json"),
    ended: NodePath.join(dir, "ended.json")
  }
}

/** Writes via a temporary file and rename, so a crash never leaves half a record. */
const writeAtomic = async (file: string, text: string) => {
  const temp = `${file}.tmp-${process.pid}`
  await Fs.writeFile(temp, text, { mode: 0o600 })
  await Fs.rename(temp, file)
}

export const writeSandboxRecord = (paths: SandboxPaths, record: SandboxRecord) =>
  writeAtomic(paths.record, Schema.encodeSync(SandboxRecordJson)(record))

export const writeRunRecord = (paths: SandboxPaths, record: RunRecord) =>
  writeAtomic(paths.run, Schema.encodeSync(RunRecordJson)(record))

const readDecoded = async <A>(file: string, decode: (text: string) => A): Promise<A | undefined> => {
  let text: string
  try {
    text = await Fs.readFile(file, "utf8")
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

export const readSandboxRecord = (paths: SandboxPaths) =>
  readDecoded(paths.record, Schema.decodeUnknownSync(SandboxRecordJson))

export const readRunRecord = (paths: SandboxPaths) => readDecoded(paths.run, Schema.decodeUnknownSync(RunRecordJson))

export const writeExit = (paths: SandboxPaths, exit: SandboxExit) => writeAtomic(paths.ended, Schema.encodeSync(ExitJson)(exit))

export const readExit = (paths: SandboxPaths) => readDecoded(paths.ended, Schema.decodeUnknownSync(ExitJson))

/** The init's exit status from bubblewrap's JSON status documents (`{"exit-code": N}`), if it ended. */
export const readExitCode = async (paths: SandboxPaths): Promise<number | undefined> => {
  const text = await Fs.readFile(paths.status, "utf8").catch(() => "")
  const match = /"exit-code"\s*:\s*(\d+)/.exec(text)
  return match ? Number(match[1]) : undefined
}

/** State letter and start time of a process, or undefined when there is no such process. */
export const procStat = async (pid: number): Promise<{ state: string; startTicks: number } | undefined> => {
  try {
    const text = await Fs.readFile(`/proc/${pid}/stat`, "utf8")
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ")
    return { state: fields[0]!, startTicks: Number(fields[19]) }
  } catch {
    return undefined
  }
}

export const sameProcess = async (pid: number, startTicks: number): Promise<boolean> => {
  const stat = await procStat(pid)
  return stat !== undefined && stat.startTicks === startTicks && stat.state !== "Z" && stat.state !== "X"
}

/**
 * True when the recorded run still runs: its pid 1 (same pid, same start time, not a zombie)
 * and, when recorded, the host-side bubblewrap that waits for it. That one exits as soon as the
 * init ends, also when pid 1 lingers for processes left inside; a sandbox without it is not
 * watched any more and counts as ended.
 */
export const isAlive = async (run: RunRecord): Promise<boolean> =>
  (await sameProcess(run.pid, run.startTicks)) &&
  (run.monitorPid === undefined || (await sameProcess(run.monitorPid, run.monitorStartTicks ?? -1)))

const sameProcessSync = (pid: number, startTicks: number): boolean => {
  let text: string
  try {
    text = FsSync.readFileSync(`/proc/${pid}/stat`, "utf8")
  } catch {
    return false
  }
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ")
  return Number(fields[19]) === startTicks && fields[0] !== "Z" && fields[0] !== "X"
}

/**
 * `isAlive` without the thread pool: /proc reads never wait on a disk, and done synchronously
 * they cost a few microseconds, which is what a poll of hundreds of sandboxes wants.
 */
export const isAliveSync = (run: RunRecord): boolean =>
  sameProcessSync(run.pid, run.startTicks) &&
  (run.monitorPid === undefined || sameProcessSync(run.monitorPid, run.monitorStartTicks ?? -1))

/** True when the run's pid 1 still runs (whatever became of the host-side bubblewrap). */
export const isInitAlive = (run: RunRecord): Promise<boolean> => sameProcess(run.pid, run.startTicks)
