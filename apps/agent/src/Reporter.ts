/**
 * Reports to the control plane: each `AgentReport` goes to its sandbox actor's mailbox on the
 * subject that names this host as the sender (`actor.sandbox.<partition>.<sandboxId>.host.<hostId>`,
 * the only mailbox subjects this host's NATS user may publish) with a msgID, so that a report
 * sent twice (a command redelivered after the agent died between publishing and acking) is
 * applied once.
 *
 * msgIDs:
 *   `report:<hostId>:<command msg id>` for the answer to a command (the command's own
 *   `Nats-Msg-Id`, or `seq:<stream sequence>` when it was published without one);
 *   `reconcile:<hostId>:<agent start ms>:<sandboxId>` for what a starting agent finds on disk.
 */
import * as Mailbox from "@svc/bus/Mailbox"
import type { BusError, Nats } from "@svc/bus/Nats"
import { AgentReport, reportSender, SANDBOX_MAILBOX } from "@svc/host-protocol/Protocol"
import { Context, Effect, Layer } from "effect"

export class Reporter extends Context.Service<Reporter, {
  /** Publishes and waits for the stream's acknowledgement. */
  report(report: AgentReport, msgID: string): Effect.Effect<void, BusError | Mailbox.InvalidActorMessage>
}>()("@svc/agent/Reporter") {
  /** To the sandbox actor's mailbox over `Nats`. */
  static readonly layer = Layer.effect(
    Reporter,
    Effect.gen(function*() {
      const context = yield* Effect.context<Nats>()
      const report = Effect.fn("Reporter.report")(function*(report: AgentReport, msgID: string) {
        yield* Mailbox.send(SANDBOX_MAILBOX, AgentReport, report.sandboxId, report, {
          msgID,
          sender: reportSender(report.hostId)
        }).pipe(
          Effect.provideContext(context)
        )
      })
      return Reporter.of({ report })
    })
  )
}

export const commandMsgId = (hostId: string, commandKey: string) => `report:${hostId}:${commandKey}`
export const reconcileMsgId = (hostId: string, startedAt: number, sandboxId: string) =>
  `reconcile:${hostId}:${startedAt}:${sandboxId}`
