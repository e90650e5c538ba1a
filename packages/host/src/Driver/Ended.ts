/**
 * `ended`: noticing that a sandbox's run ended on its own (its init died: out of memory,
 * killed, exited) and saying why. A running sandbox costs two /proc reads (its pid 1 and the
 * host-side bubblewrap that waits for the init); a run found ended is torn down like a stop
 * (processes, cgroups, network; the file system stays) and how it ended is kept in `ended.json`
 * until the next start or stop.
 *
 * Why it ended: the host-side bubblewrap writes the init's exit status to `status.json`
 * (`--json-status-fd`; 128 + n when signal n ended it, as shells report it), and the memory
 * cgroup counts its OOM kills. An init ended by SIGKILL (or whose status was never written:
 * the OOM killer may pick the host-side bubblewrap, which is charged to the sandbox too) in a
 * group whose OOM kill count rose during the run ran out of memory. A count raised by an earlier
 * OOM kill of another process, followed by a SIGKILL from outside, reads as out of memory too.
 */
import { Effect } from "effect"
import { SandboxExit } from "../Driver.ts"
import { checkId, type DriverHost, tryHost } from "./Host.ts"
import type { Runs } from "./Run.ts"
import { isAlive, isAliveSync, readExit, readExitCode, readRunRecord, sameProcess, writeExit } from "./State.ts"

const SIGKILL_STATUS = 128 + 9

/** The reason in words, as the sandbox's `errorMessage` shows it. */
export const describeExit = (exitCode: number | undefined, oomKills: number, ramMb: number): string => {
  if (oomKills > 0 && (exitCode === undefined || exitCode === SIGKILL_STATUS)) return `out of memory at ram_mb ${ramMb}`
  if (exitCode === undefined) return "the sandbox's init ended (no exit status was recorded)"
  if (exitCode > 128) return `killed by signal ${exitCode - 128}`
  return `exited with code ${exitCode}`
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export const makeEnded = (host: DriverHost, runs: Pick<Runs, "teardownRun">) => {
  const { cgroups } = host

  const reap = Effect.fn("SandboxDriver.ended")(function*(sandboxId: string) {
    const id = yield* checkId(sandboxId)
    return yield* host.withLock(
      id,
      Effect.gen(function*() {
        const { paths, record } = yield* host.loadRecord(id)
        const run = yield* tryHost("ended", () => readRunRecord(paths))
        // Stopped (no run), or reaped already: what was recorded, if anything.
        if (run === undefined) return yield* tryHost("ended", () => readExit(paths))
        if (yield* tryHost("ended", () => isAlive(run))) {
          host.running.set(id, { record, run })
          return undefined
        }
        host.running.delete(id)
        const exitCode = yield* tryHost("ended", async () => {
          // pid 1 gone but its bubblewrap still there: it is writing the status right now.
          for (let i = 0; i < 50; i++) {
            const code = await readExitCode(paths)
            if (code !== undefined) return code
            const monitorAlive = run.monitorPid !== undefined &&
              (await sameProcess(run.monitorPid, run.monitorStartTicks ?? -1))
            if (!monitorAlive) return await readExitCode(paths)
            await sleep(10)
          }
          return undefined
        })
        // Read before the teardown removes the group.
        const oomKills = (yield* tryHost("ended", () => cgroups.oomKills(id))) ?? 0
        const exit = new SandboxExit({
          sandboxId: id,
          ...(exitCode !== undefined ? { exitCode } : {}),
          outOfMemory: oomKills > 0 && (exitCode === undefined || exitCode === SIGKILL_STATUS),
          reason: describeExit(exitCode, oomKills, record.ramMb),
          endedAt: new Date().toISOString()
        })
        yield* runs.teardownRun(record, paths, run)
        yield* tryHost("ended", () => writeExit(paths, exit))
        return exit
      })
    )
  })

  const ended = (sandboxId: string) =>
    Effect.suspend(() => {
      // The common case, synchronous and lock-free: a running sandbox this process knows (ids in
      // the cache were checked when they entered it).
      const cached = host.running.get(sandboxId)
      return cached !== undefined && isAliveSync(cached.run) ? Effect.succeed(undefined) : reap(sandboxId)
    })

  return { ended }
}
