/**
 * Each running sandbox's metrics and log lines (docs/architecture.md#sandbox-logs-and-metrics):
 * every `metricsIntervalMs` (5 s), for each sandbox this host last reported running,
 * - a sample from its cgroup, disk image and veth (`SandboxDriver.stats`, `Sample.ts`) on
 *   `sbxmet.<id>.host.<hostId>`;
 * - for a template's sandbox with a `start_cmd`, the new lines of its output (`StartLog.ts`:
 *   read inside the sandbox, at most `START_LOG_LINES_PER_SECOND` per second kept, the rest
 *   dropped and counted in a line of its own) on `sbxlog.<id>.host.<hostId>`;
 * - for a sandbox no longer running whose init died, how (`out of memory: ...`, `exited: ...`).
 *
 * Where the `start_cmd` output was read up to is kept on disk (`agent/start-log/<id>.json`), so
 * a restarted agent goes on where it was. A sample or line that cannot be published is dropped
 * (logged): the next round carries on.
 */
import {
  ensureStreams,
  hostLogSubject,
  type LogEntry,
  metricSubject,
  publishLines,
  publishSample,
  START_LOG_LINES_PER_SECOND
} from "@svc/host-protocol/SandboxTelemetry"
import { DriverExecRequest, SandboxDriver } from "@svc/host/Driver"
import { Clock, Context, Duration, Effect, Layer, Schedule, Schema } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { AgentConfig } from "./Config.ts"
import { LocalSandboxes } from "./LocalSandboxes.ts"
import { makeRuntimes } from "./LocalSandboxes/Runtimes.ts"
import { type CpuReading, sampleOf } from "./SandboxObserver/Sample.ts"
import { parseRead, READ_BYTES, READ_SCRIPT, START, type StartLogCursor, take } from "./SandboxObserver/StartLog.ts"

const CursorJson = Schema.fromJsonString(Schema.Struct({ offset: Schema.Int, partial: Schema.String }))

/** Rounds between two removals of cursors whose sandbox is gone from the disk. */
const SWEEP_EVERY = 120

export class SandboxObserver extends Context.Service<SandboxObserver, {
  /** Rounds completed since start (for tests and logs). */
  readonly rounds: Effect.Effect<number>
}>()("@svc/agent/SandboxObserver") {
  static readonly layer = Layer.effect(
    SandboxObserver,
    Effect.gen(function*() {
      const config = yield* AgentConfig
      const driver = yield* SandboxDriver
      const local = yield* LocalSandboxes
      const runtimes = makeRuntimes(config.dataDir)
      const hostId = config.hostId
      const cursorDir = NodePath.join(config.dataDir, "agent", "start-log")
      const allowance = Math.max(1, Math.ceil((START_LOG_LINES_PER_SECOND * config.metricsIntervalMs) / 1000))

      const cpu = new Map<string, CpuReading>()
      const cursors = new Map<string, StartLogCursor>()
      let watched = new Set<string>()
      let rounds = 0

      const cursorFile = (sandboxId: string) => NodePath.join(cursorDir, `${sandboxId}.json`)
      const loadCursor = (sandboxId: string): StartLogCursor => {
        const known = cursors.get(sandboxId)
        if (known !== undefined) return known
        try {
          return Schema.decodeUnknownSync(CursorJson)(FsSync.readFileSync(cursorFile(sandboxId), "utf8"))
        } catch {
          return START
        }
      }
      const saveCursor = (sandboxId: string, cursor: StartLogCursor) =>
        Effect.promise(async () => {
          cursors.set(sandboxId, cursor)
          await Fs.mkdir(cursorDir, { recursive: true, mode: 0o700 })
          await Fs.writeFile(cursorFile(sandboxId), Schema.encodeSync(CursorJson)(cursor), { mode: 0o600 })
        })

      const lines = (sandboxId: string, entries: ReadonlyArray<LogEntry>) =>
        entries.length === 0 ? Effect.void : publishLines(hostLogSubject(sandboxId, hostId), entries)

      const sample = (sandboxId: string) =>
        Effect.gen(function*() {
          const stats = yield* driver.stats(sandboxId)
          const now = yield* Clock.currentTimeMillis
          const { reading, sample } = sampleOf(stats, cpu.get(sandboxId), now)
          if (reading !== undefined) cpu.set(sandboxId, reading)
          yield* publishSample(metricSubject(sandboxId, hostId), sample)
        })

      const startLog = (sandboxId: string) =>
        Effect.gen(function*() {
          const runtime = yield* runtimes.load(sandboxId)
          if (runtime?.startCmd === null || runtime?.startCmd === undefined) return
          const cursor = loadCursor(sandboxId)
          const result = yield* driver.exec(
            sandboxId,
            new DriverExecRequest({
              cmd: ["/bin/sh", "-c", READ_SCRIPT, "svc-start-log", String(cursor.offset), String(READ_BYTES)],
              timeoutMs: 5_000,
              maxOutputBytes: READ_BYTES + 64
            })
          )
          const read = result.exitCode === 0 ? parseRead(result.stdout) : undefined
          if (read === undefined) return
          const taken = take(cursor, read.size, read.chunk, allowance)
          const ts = new Date(yield* Clock.currentTimeMillis).toISOString()
          const entries: Array<LogEntry> = taken.lines.map((text) => ({ ts, source: "start_cmd", text }))
          if (taken.droppedLines > 0 || taken.droppedBytes > 0) {
            entries.push({
              ts,
              source: "host",
              text: `dropped ${taken.droppedLines} lines and ${taken.droppedBytes} more bytes of start_cmd output ` +
                `(at most ${allowance} lines per ${config.metricsIntervalMs / 1000} s are kept)`
            })
          }
          yield* lines(sandboxId, entries)
          if (taken.cursor.offset !== cursor.offset || taken.cursor.partial !== cursor.partial) {
            yield* saveCursor(sandboxId, taken.cursor)
          }
        })

      /** A sandbox no longer running: how its run ended when its init died (nothing after a stop). */
      const ended = (sandboxId: string) =>
        Effect.gen(function*() {
          cpu.delete(sandboxId)
          cursors.delete(sandboxId)
          const exit = yield* driver.ended(sandboxId)
          if (exit === undefined) return
          yield* lines(sandboxId, [{
            ts: exit.endedAt,
            source: "host",
            text: exit.outOfMemory ? `out of memory: ${exit.reason}` : `exited: ${exit.reason}`
          }])
        })

      const quietly = (what: string, sandboxId: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        effect.pipe(
          Effect.catchCause((cause) => Effect.logDebug(`agent: sandbox ${what} not recorded`, { sandboxId, cause }))
        )

      /** Cursors of sandboxes gone from the disk are removed. */
      const sweep = Effect.gen(function*() {
        const listed = new Set((yield* driver.list).map((s) => s.sandboxId))
        const files = yield* Effect.promise(() => Fs.readdir(cursorDir).catch(() => [] as Array<string>))
        for (const file of files) {
          const id = file.replace(/\.json$/, "")
          if (!listed.has(id)) yield* Effect.promise(() => Fs.rm(NodePath.join(cursorDir, file), { force: true }))
        }
      })

      const round = Effect.gen(function*() {
        const running = yield* local.running
        const now = new Set(running)
        // Those that died since the last round, seen running here or not (a start killed at once).
        const gone = new Set([...[...watched].filter((id) => !now.has(id)), ...(yield* local.takeEnded)])
        watched = now
        yield* Effect.forEach(
          running,
          (sandboxId) =>
            Effect.all([
              quietly("sample", sandboxId)(sample(sandboxId)),
              quietly("start_cmd output", sandboxId)(startLog(sandboxId))
            ], { concurrency: 2, discard: true }),
          { concurrency: 8, discard: true }
        )
        yield* Effect.forEach(gone, (sandboxId) => quietly("end", sandboxId)(ended(sandboxId)), {
          concurrency: 4,
          discard: true
        })
        rounds++
        if (rounds % SWEEP_EVERY === 0) yield* quietly("cursor sweep", "*")(sweep)
      })

      yield* ensureStreams().pipe(
        Effect.retry(Schedule.spaced(Duration.seconds(1))),
        Effect.andThen(Effect.repeat(round, Schedule.spaced(Duration.millis(config.metricsIntervalMs)))),
        Effect.forkScoped
      )
      return SandboxObserver.of({ rounds: Effect.sync(() => rounds) })
    })
  )
}
