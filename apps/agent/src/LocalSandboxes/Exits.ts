/**
 * The exit checks: the sandboxes last reported running (`track`, as `Decision.tracking` says),
 * and for each, whether its init died (`checkExits`, polled by `Watcher.ts`): such a sandbox is
 * ended by the driver and reported `exited` with the reason. A sandbox busy with a command (its
 * lock held) is skipped until the next check.
 */
import type { AgentCommand, AgentReport } from "@svc/host-protocol/Protocol"
import type { SandboxDriver } from "@svc/host/Driver"
import { Effect, Option, Semaphore } from "effect"
import { tracking } from "./Decision.ts"
import { describeDriverError } from "./DriverErrors.ts"
import type { MakeReport } from "./Report.ts"

export const makeExits = (options: {
  readonly driver: SandboxDriver["Service"]
  readonly lockOf: (sandboxId: string) => Semaphore.Semaphore
  readonly report: MakeReport
}) => {
  const { driver, lockOf, report } = options
  const running = new Set<string>()
  /** Sandboxes whose init died since `takeEnded` last ran: an observer's round may not have seen them running. */
  const ended = new Set<string>()

  /** Keeps `running` as the reports say: the sandboxes whose init should be alive. */
  const track = (command: AgentCommand["_tag"] | "reconcile", sent: AgentReport) => {
    switch (tracking(command, sent.status)) {
      case "add":
        running.add(sent.sandboxId)
        break
      case "remove":
        running.delete(sent.sandboxId)
        break
      case "keep":
        break
    }
    return sent
  }

  /** Under the sandbox's lock: whether its run ended on its own, as an `exited` report. */
  const checkExit = (sandboxId: string) =>
    Effect.gen(function*() {
      if (!running.has(sandboxId)) return undefined
      const exit = yield* Effect.result(driver.ended(sandboxId))
      if (exit._tag === "Failure") {
        if (exit.failure._tag === "SandboxNotFound") {
          // Gone from the disk behind the agent's back: the next start's reconcile reports it.
          running.delete(sandboxId)
          yield* Effect.logWarning("agent: a running sandbox is gone from the disk", { sandboxId })
        } else {
          yield* Effect.logWarning("agent: could not check a sandbox", {
            sandboxId,
            error: describeDriverError(exit.failure)
          })
        }
        return undefined
      }
      if (exit.success === undefined) return undefined
      running.delete(sandboxId)
      ended.add(sandboxId)
      yield* Effect.logWarning("agent: a sandbox's init ended", { sandboxId, reason: exit.success.reason })
      return yield* report(sandboxId, "exited", {
        errorMessage: exit.success.reason,
        // The init itself ended by the OOM killer: the sandbox's `stop_reason` is `oom`.
        ...(exit.success.outOfMemory ? { outOfMemory: true } : {})
      })
    })

  const checkExits = Effect.suspend(() =>
    Effect.forEach(
      [...running],
      (sandboxId) =>
        Effect.map(
          Semaphore.withPermitsIfAvailable(lockOf(sandboxId), 1)(checkExit(sandboxId)),
          Option.getOrUndefined
        ),
      // A running sandbox's check is synchronous; a few at once for the teardowns of dead ones.
      { concurrency: 4 }
    )
  ).pipe(
    Effect.map((reports) => reports.filter((r): r is AgentReport => r !== undefined)),
    Effect.withSpan("LocalSandboxes.checkExits")
  )

  return {
    isRunning: (sandboxId: string) => running.has(sandboxId),
    runningIds: Effect.sync(() => [...running]),
    takeEnded: Effect.sync(() => {
      const taken = [...ended]
      ended.clear()
      return taken
    }),
    track,
    checkExits
  }
}
