/**
 * The agent's command loop: its own durable pull consumer on the `AGENT` stream, filtered on
 * `agent.<hostId>.>`, explicit ack.
 *
 * Order: commands for one sandbox are applied one after the other in stream order (a queue per
 * sandbox); different sandboxes proceed side by side, at most `concurrency` at once. The
 * consumer's `max_ack_pending` bounds what is held. A message is acked only after its report
 * was acknowledged by the actor's stream; a redelivered one is applied again, which the
 * commands' idempotence and the report's msgID make harmless.
 *
 * Failures: a message that is not a command for this host is terminated (bare `term()`, see
 * docs/architecture.md#nats-facts). The journal's disk or NATS failing is retried in place, so that
 * the sandbox's later commands keep waiting behind it.
 *
 * Start: the stream and the consumer are ensured, the journal is reconciled with the disk and
 * its reports published, and only then are commands consumed. Stop: consuming stops at once,
 * commands not started are given back (`nak`), those in progress get a few seconds to finish.
 */
import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream"
import { ENTITY_ID } from "@svc/bus/Mailbox"
import { BusError, Nats } from "@svc/bus/Nats"
import { ensureConsumer, ensureStream } from "@svc/bus/Topology"
import * as Trace from "@svc/bus/Trace"
import { AGENT_STREAM_SPEC, AgentCommand, agentConsumer } from "@svc/host-protocol/Protocol"
import { Context, Deferred, Duration, Effect, FiberSet, Layer, Metric, Schedule, Schema, Semaphore } from "effect"
import { AgentConfig } from "./Config.ts"
import { LocalSandboxes } from "./LocalSandboxes.ts"
import { commandMsgId, reconcileMsgId, Reporter } from "./Reporter.ts"
import { TemplateImages } from "./TemplateImages.ts"

/**
 * Short, because it is also how long commands delivered to an agent that was killed wait
 * before the restarted agent gets them; a command that takes longer is kept with `working()`.
 */
const ACK_WAIT_MS = 5_000
const MAX_ACK_PENDING = 64
const STOP_GRACE_MS = 10_000

const decoder = new TextDecoder()
const decodeCommand = Schema.decodeUnknownEffect(Schema.fromJsonString(AgentCommand))

/** Retries a failing step for ever (until interrupted), with a capped exponential backoff. */
export const retryForever = <A, E, R>(label: string, effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.tapError((error) => Effect.logWarning(`agent: ${label} failed, retrying`, { error: String(error) })),
    Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(100)), Schedule.spaced(Duration.seconds(5))])),
    // The schedule never ends: this cannot fail.
    Effect.orDie
  )

/** Commands this agent settled, by command and outcome (Prometheus: `svc_agent_commands_total`). */
export const AgentCommands = Metric.counter("svc_agent_commands_total", {
  description: "Agent commands settled by this host's agent, by command and outcome (acked, terminated)",
  incremental: true
})

interface Job {
  readonly msg: JsMsg
  readonly command: AgentCommand
  /** The command's identity for the report's msgID. */
  readonly key: string
  readonly keepAlive: ReturnType<typeof setInterval>
}

export class CommandConsumer extends Context.Service<CommandConsumer, {
  /** Completes once reconciling is done and commands are being consumed. */
  readonly ready: Effect.Effect<void>
  /** Commands applied since start (for tests and logs). */
  readonly applied: Effect.Effect<number>
}>()("@svc/agent/CommandConsumer") {
  static readonly layer = Layer.effect(
    CommandConsumer,
    Effect.gen(function*() {
      const config = yield* AgentConfig
      const nats = yield* Nats
      const lifecycle = yield* LocalSandboxes
      const reporter = yield* Reporter
      const images = yield* TemplateImages
      const hostId = config.hostId
      const context = yield* Effect.context<never>()
      const startedAt = Date.now()
      const ready = yield* Deferred.make<void>()
      const semaphore = yield* Semaphore.make(config.concurrency)
      const jobs = yield* FiberSet.make<void, never>()
      const run = yield* FiberSet.runtime(jobs)<never>()
      const queues = new Map<string, Array<Job>>()
      const held = new Set<number>()
      let stopping = false
      let applied = 0
      const prefix = nats.subject("agent", hostId) + "."

      const settle = (job: Job, how: "ack" | "nak" | "term") => {
        clearInterval(job.keepAlive)
        held.delete(job.msg.seq)
        if (how !== "nak") {
          Metric.withAttributes(AgentCommands, {
            command: job.command._tag,
            outcome: how === "ack" ? "acked" : "terminated"
          }).updateUnsafe(1, context)
        }
        try {
          if (how === "ack") job.msg.ack()
          else if (how === "nak") job.msg.nak()
          else job.msg.term()
        } catch {
          // Connection gone: the server redelivers after ack_wait.
        }
      }

      const handle = (job: Job) =>
        Effect.gen(function*() {
          if (job.command._tag === "build") {
            // A build ends in the `builds` KV entry, not in a report to a sandbox.
            yield* images.build(job.command)
            settle(job, "ack")
            applied++
            return
          }
          const report = yield* retryForever("applying a command", lifecycle.apply(job.command))
          const sent = yield* retryForever(
            "publishing a report",
            reporter.report(report, commandMsgId(hostId, job.key)).pipe(
              // A report its schema or the actor refuses cannot improve with time.
              Effect.catchTag("InvalidActorMessage", (e) => Effect.succeed(e))
            )
          )
          if (sent !== undefined) {
            yield* Effect.logError("agent: report refused, command terminated", {
              sandboxId: job.command.sandboxId,
              error: sent.message
            })
            settle(job, "term")
          } else settle(job, "ack")
          applied++
        }).pipe(
          Effect.onInterrupt(() => Effect.sync(() => settle(job, "nak"))),
          // The trace of whoever sent the command (its `traceparent` header), when spans are exported.
          Trace.continueMessage("Agent.command", job.msg.headers, {
            attributes: { command: job.command._tag, sandboxId: job.command.sandboxId }
          })
        )

      /** Drains one sandbox's queue in order. */
      const drain = (sandboxId: string) =>
        Effect.gen(function*() {
          for (;;) {
            const queue = queues.get(sandboxId)
            const job = queue?.[0]
            if (queue === undefined || job === undefined) {
              queues.delete(sandboxId)
              return
            }
            if (stopping) {
              for (const waiting of queue) settle(waiting, "nak")
              queues.delete(sandboxId)
              return
            }
            yield* semaphore.withPermit(handle(job))
            queue.shift()
          }
        })

      const refuse = (msg: JsMsg, reason: string) => {
        try {
          msg.term()
        } catch {
          // Gone.
        }
        run(
          Effect.logError("agent: message is not a command for this host, terminated", { subject: msg.subject, reason })
        )
      }

      /** Called by the client for each delivered message, in stream order. */
      const receive = (msg: JsMsg) => {
        // Delivered again while still queued here (should not happen: we signal progress).
        if (held.has(msg.seq)) return
        if (stopping) {
          try {
            msg.nak()
          } catch {
            // Gone.
          }
          return
        }
        const tag = msg.subject.startsWith(prefix) ? msg.subject.slice(prefix.length) : ""
        const decoded = Effect.runSyncExit(decodeCommand(decoder.decode(msg.data)))
        if (decoded._tag === "Failure") return refuse(msg, "body is not a command")
        const command = decoded.value
        if (command._tag !== tag) return refuse(msg, `body is a ${command._tag} command on subject ${msg.subject}`)
        // Reports go to the actor named by this id: it must be a plain subject token.
        if (!ENTITY_ID.test(command.sandboxId)) return refuse(msg, "sandbox id is not a valid entity id")
        held.add(msg.seq)
        const job: Job = {
          msg,
          command,
          key: msg.headers?.get("Nats-Msg-Id") || `seq:${msg.seq}`,
          keepAlive: setInterval(() => {
            try {
              msg.working()
            } catch {
              // Gone.
            }
          }, ACK_WAIT_MS / 3)
        }
        const queue = queues.get(command.sandboxId)
        if (queue !== undefined) queue.push(job)
        else {
          queues.set(command.sandboxId, [job])
          run(drain(command.sandboxId))
        }
      }

      const start = Effect.gen(function*() {
        const stream = yield* retryForever("ensuring the AGENT stream", ensureStream(AGENT_STREAM_SPEC))
        const { consumer: durable } = yield* retryForever(
          "ensuring the command consumer",
          ensureConsumer(AGENT_STREAM_SPEC.name, {
            durable_name: agentConsumer(hostId),
            filter_subject: `agent.${hostId}.>`,
            ack_policy: AckPolicy.Explicit,
            deliver_policy: DeliverPolicy.All,
            ack_wait: ACK_WAIT_MS * 1_000_000,
            max_ack_pending: MAX_ACK_PENDING,
            max_deliver: -1
          })
        )
        const reports = yield* retryForever("reconciling", lifecycle.reconcile)
        for (const report of reports) {
          yield* retryForever(
            "publishing a reconcile report",
            reporter.report(report, reconcileMsgId(hostId, startedAt, report.sandboxId)).pipe(
              Effect.catchTag(
                "InvalidActorMessage",
                (e) => Effect.logError("agent: reconcile report refused", { error: e.message })
              )
            )
          )
        }
        yield* Effect.logInfo("agent: reconciled", { hostId, reports: reports.length })
        const consumer = yield* retryForever(
          "opening the command consumer",
          Effect.tryPromise({
            try: () => nats.js.consumers.get(stream, durable),
            catch: (cause) => new BusError({ operation: `consumer ${durable}`, message: String(cause) })
          })
        )
        const messages = yield* retryForever(
          "consuming commands",
          Effect.tryPromise({
            try: () => consumer.consume({ max_messages: MAX_ACK_PENDING, callback: receive }),
            catch: (cause) => new BusError({ operation: `consume ${durable}`, message: String(cause) })
          })
        )
        yield* Effect.addFinalizer(() =>
          Effect.gen(function*() {
            // Stop taking messages; give back what is queued; let what runs finish.
            stopping = true
            yield* Effect.promise(() => messages.close().catch(() => undefined))
            yield* FiberSet.awaitEmpty(jobs).pipe(Effect.timeoutOption(Duration.millis(STOP_GRACE_MS)))
          })
        )
        yield* Deferred.succeed(ready, undefined)
      })
      yield* Effect.forkScoped(start)

      return CommandConsumer.of({
        ready: Deferred.await(ready),
        applied: Effect.sync(() => applied)
      })
    })
  )
}
