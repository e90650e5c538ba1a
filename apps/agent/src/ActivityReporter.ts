/**
 * Reports this host's sandboxes' activity to their actors (docs/architecture.md#host-agents):
 * every `ACTIVITY_REPORT_MS` each sandbox the data plane saw (`@svc/host/Activity`) is checked,
 * and a change (busy or not, activity since the last report) is sent as an `ActivityReport` on
 * the sandbox's report subject, with how long ago its last activity ended on the monotonic
 * clock. A background process started through the API and still running keeps it busy. A
 * sandbox with nothing running and nothing left to report is forgotten (it is seen again at its
 * next call). At most one report per sandbox per period: a sandbox under constant calls costs
 * its actor one message a second, a busy one nothing until it is idle again.
 *
 * msgID `activity:<hostId>:<agent start ms>:<n>`: a report retried after a lost acknowledgement
 * is applied once.
 */
import * as Mailbox from "@svc/bus/Mailbox"
import { Nats } from "@svc/bus/Nats"
import { ACTIVITY_REPORT_MS, ActivityReport, reportSender, SANDBOX_MAILBOX } from "@svc/host-protocol/Protocol"
import { SandboxActivity } from "@svc/host/Activity"
import { SandboxDriver } from "@svc/host/Driver"
import { Context, Duration, Effect, Layer, Schedule } from "effect"
import { retryForever } from "./Commands.ts"
import { AgentConfig } from "./Config.ts"

export class ActivityReporter extends Context.Service<ActivityReporter, {
  /** Activity reports sent since start (for tests and logs). */
  readonly reported: Effect.Effect<number>
}>()("@svc/agent/ActivityReporter") {
  /** Needs the `SandboxActivity` the data plane feeds. */
  static readonly layer = Layer.effect(
    ActivityReporter,
    Effect.gen(function*() {
      const config = yield* AgentConfig
      const activity = yield* SandboxActivity
      const driver = yield* SandboxDriver
      const nats = yield* Nats
      const startedAt = Date.now()
      let n = 0
      // What the previous agent reported is unknown: each running sandbox is reported afresh.
      for (const row of yield* driver.list.pipe(Effect.orElseSucceed(() => []))) {
        if (row.status === "running") activity.found(row.sandboxId)
      }

      const send = (report: ActivityReport) =>
        retryForever(
          "publishing an activity report",
          Mailbox.send(SANDBOX_MAILBOX, ActivityReport, report.sandboxId, report, {
            msgID: `activity:${config.hostId}:${startedAt}:${n}`,
            sender: reportSender(config.hostId)
          }).pipe(
            Effect.provideService(Nats, nats),
            Effect.catchTag(
              "InvalidActorMessage",
              (e) => Effect.logError("agent: activity report refused", { error: e.message })
            )
          )
        )

      const check = Effect.gen(function*() {
        for (const sandboxId of activity.ids()) {
          const processes = yield* driver.processes(sandboxId).pipe(Effect.orElseSucceed(() => []))
          const running = processes.filter((p) => p.state === "running")
          const due = activity.due(sandboxId, (quiet) => running.some((p) => !quiet.has(p.pid)))
          if (due !== undefined) {
            n++
            yield* send({
              _tag: "ActivityReport",
              sandboxId,
              hostId: config.hostId,
              busy: due.busy,
              idleMs: Math.round(due.idleMs)
            })
          } else if (running.length === 0) {
            activity.forget(sandboxId)
          }
        }
      })
      yield* Effect.forkScoped(
        Effect.repeat(
          check.pipe(Effect.catchCause((cause) => Effect.logWarning("agent: activity check failed", { cause }))),
          Schedule.spaced(Duration.millis(ACTIVITY_REPORT_MS))
        )
      )
      return ActivityReporter.of({ reported: Effect.sync(() => n) })
    })
  )
}
