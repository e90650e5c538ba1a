/**
 * Notices sandboxes whose init died (out of memory, killed, crashed) within about a second:
 * every `exitCheckMs` (500 ms) `LocalSandboxes.checkExits` looks at each sandbox reported running
 * (two /proc reads each, so hundreds cost little), and each `exited` report it returns is sent
 * to the sandbox's actor, which moves the sandbox to `error` with the reason.
 *
 * msgID `exited:<hostId>:<sandboxId>:<at>`: a report retried after a lost acknowledgement is
 * applied once.
 */
import { Context, Duration, Effect, Layer, Schedule } from "effect"
import { retryForever } from "./Commands.ts"
import { AgentConfig } from "./Config.ts"
import { LocalSandboxes } from "./LocalSandboxes.ts"
import { Reporter } from "./Reporter.ts"

export const exitMsgId = (hostId: string, sandboxId: string, at: number) => `exited:${hostId}:${sandboxId}:${at}`

export class ExitWatcher extends Context.Service<ExitWatcher, {
  /** Exits reported since start (for tests and logs). */
  readonly reported: Effect.Effect<number>
}>()("@svc/agent/ExitWatcher") {
  static readonly layer = Layer.effect(
    ExitWatcher,
    Effect.gen(function*() {
      const config = yield* AgentConfig
      const lifecycle = yield* LocalSandboxes
      const reporter = yield* Reporter
      let reported = 0
      const check = Effect.gen(function*() {
        const reports = yield* lifecycle.checkExits
        for (const report of reports) {
          yield* retryForever(
            "publishing an exit report",
            reporter.report(report, exitMsgId(config.hostId, report.sandboxId, report.at)).pipe(
              Effect.catchTag(
                "InvalidActorMessage",
                (e) => Effect.logError("agent: exit report refused", { error: e.message })
              )
            )
          )
          reported++
        }
      })
      yield* Effect.forkScoped(Effect.repeat(check, Schedule.spaced(Duration.millis(config.exitCheckMs))))
      return ExitWatcher.of({ reported: Effect.sync(() => reported) })
    })
  )
}
