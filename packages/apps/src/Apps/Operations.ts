/**
 * The executor: carries out the operations the app controllers ask for (`appop.<appId>.<kind>`
 * on the `APP_OPS` stream, workqueue retention, one durable consumer shared by every runtime
 * process) and sends each outcome back to its app's actor (msgID `result:<opId>`: a repeat is
 * dropped). Replicas are ordinary sandboxes made through the `Sandboxes` service, so the org's
 * quotas and usage limit apply to them like to any other.
 *
 * Each operation may run more than once (a runtime process dies before its ack): all four are
 * idempotent.
 * - `CreateReplica`: `Sandboxes.create` with the `Idempotency-Key` `app-replica:<opId>` (a
 *   repeat answers the same sandbox). A refusal (402, 429, 400, 409) is an outcome, not an error:
 *   the controller backs off.
 * - `LaunchCmd`: starts the app's `cmd` as a background process of the sandbox, unless one with
 *   that argv runs already (a repeat).
 * - `RemoveReplica`: `Sandboxes.remove` (a deleted or missing sandbox is removed already); the
 *   outcome says whether it is deleted or being deleted.
 * - `Observe`: reads each replica's sandbox state, and for a running one with a pid whether its
 *   `cmd` still runs.
 *
 * A failure of Postgres or NATS gives the message back (nak, 2 s): it is tried again.
 */
import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream"
import * as Actors from "@svc/actors/Actors"
import { consumeScoped } from "@svc/bus/Consume"
import { BusError, Nats } from "@svc/bus/Nats"
import { ensureConsumer, ensureStream } from "@svc/bus/Topology"
import { SecretBox } from "@svc/crypto/SecretBox"
import type * as Rows from "@svc/db/Rows"
import type * as Errors from "@svc/domain/Errors"
import type { OrgId } from "@svc/domain/Ids"
import { CreateSandboxRequest } from "@svc/domain/Sandbox"
import { Processes } from "@svc/sandboxes/Processes"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { Duration, Effect, Schedule, Schema, Stream } from "effect"
import { AppActor } from "../AppActor.ts"
import { APP_METADATA_KEY, type AppMessage, AppOperation, type ObservedReplica, OPERATIONS_SUBJECT } from "./Model.ts"

export const APP_OPS_STREAM = "APP_OPS"
export const APP_OPS_CONSUMER = "app_ops"
/** Operations carried out at once by one runtime process. */
const CONCURRENCY = 8

/** The AAD the app's env is sealed with. */
export const envAad = (appId: string) => `app-env:${appId}`

/** The stream the controllers' operations go to; before anything publishes one. */
export const ensureOperationsStream = Effect.fn("AppOperations.ensure")(function*() {
  const stream = yield* ensureStream({
    name: APP_OPS_STREAM,
    subjects: [`${OPERATIONS_SUBJECT}.>`],
    retention: "workqueue",
    maxAgeMs: 7 * 24 * 3600_000,
    duplicateWindowMs: 10 * 60_000
  })
  yield* ensureConsumer(APP_OPS_STREAM, {
    durable_name: APP_OPS_CONSUMER,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: 120_000 * 1_000_000,
    max_ack_pending: 256,
    filter_subject: `${OPERATIONS_SUBJECT}.>`
  })
  return stream
})

const isInfrastructure = (e: { readonly _tag: string }): e is Rows.QueryError =>
  e._tag === "SqlError" || e._tag === "RowDecodeError"

const decodeCreate = Schema.decodeUnknownEffect(CreateSandboxRequest)
const decodeEnv = Schema.decodeUnknownEffect(Schema.fromJsonString(Schema.Record(Schema.String, Schema.String)))
const decodeOperation = Schema.decodeUnknownEffect(Schema.fromJsonString(AppOperation))

/**
 * Pulls the operations with a shared durable consumer and reports each outcome to its actor,
 * for the life of the scope (restarted after a NATS failure). Needs `Nats`, `Sandboxes`,
 * `Processes` and `SecretBox`.
 */
export const runExecutor = Effect.gen(function*() {
  const nats = yield* Nats
  const sandboxes = yield* Sandboxes
  const processes = yield* Processes
  const box = yield* SecretBox
  const stream = yield* ensureOperationsStream()

  const createReplica = (op: Extract<AppOperation, { _tag: "CreateReplica" }>) =>
    Effect.gen(function*() {
      const orgId = op.orgId as OrgId
      const env = yield* box.open(op.sealedEnv, envAad(op.appId)).pipe(
        Effect.flatMap((text) => decodeEnv(text)),
        Effect.option
      )
      if (env._tag === "None") {
        const refusal: AppMessage = {
          _tag: "CreateRefused",
          opId: op.opId,
          reason: "the app's env could not be opened",
          blocked: false
        }
        return refusal
      }
      const request = yield* decodeCreate({
        name: op.name,
        template: op.template,
        env: env.value,
        exposed_ports: op.exposedPorts,
        metadata: { [APP_METADATA_KEY]: op.appId, app_revision: op.revision }
      }).pipe(Effect.orDie)
      return yield* sandboxes.create(orgId, request, `app-replica:${op.opId}`).pipe(
        Effect.map((outcome): AppMessage => ({
          _tag: "ReplicaCreated",
          opId: op.opId,
          sandboxId: outcome._tag === "Created" ? outcome.value.id : String((outcome.body as { id: unknown }).id)
        })),
        Effect.catchTag("UsageLimitReached", (e) =>
          Effect.succeed<AppMessage>({ _tag: "CreateRefused", opId: op.opId, reason: e.error, blocked: true })),
        Effect.catchTags({
          QuotaExceeded: (e) =>
            refused(op.opId, e),
          InvalidRequest: (e) => refused(op.opId, e),
          Conflict: (e) => refused(op.opId, e),
          IdempotencyKeyReused: (e) => refused(op.opId, e),
          // No host has room now: a setback, tried again like a replica that failed.
          NoCapacity: (e) => refused(op.opId, e)
        })
      )
    })

  const refused = (opId: string, e: { readonly error: string }) =>
    Effect.succeed<AppMessage>({ _tag: "CreateRefused", opId, reason: e.error, blocked: false })

  const sameCmd = (a: ReadonlyArray<string>, b: ReadonlyArray<string>) =>
    a.length === b.length && a.every((x, i) => x === b[i])

  const launchCmd = (op: Extract<AppOperation, { _tag: "LaunchCmd" }>) =>
    Effect.gen(function*() {
      const orgId = op.orgId as OrgId
      const running = yield* processes.list(orgId, op.sandboxId)
      const found = running.find((p) => p.state === "running" && sameCmd(p.cmd, op.cmd))
      const started = found ?? (yield* processes.start(orgId, op.sandboxId, { cmd: op.cmd }))
      return { _tag: "Launched", opId: op.opId, sandboxId: op.sandboxId, pid: String(started.pid) } as AppMessage
    }).pipe(
      Effect.catchIf(
        (e) => !isInfrastructure(e),
        (e) =>
          Effect.succeed<AppMessage>({
            _tag: "LaunchFailed",
            opId: op.opId,
            sandboxId: op.sandboxId,
            reason: (e as Errors.ApiError).error
          })
      )
    )

  const removeReplica = (op: Extract<AppOperation, { _tag: "RemoveReplica" }>) =>
    sandboxes.remove(op.orgId as OrgId, op.sandboxId).pipe(
      Effect.map((record) => record.state === "deleted"),
      Effect.catchTag("NotFound", () => Effect.succeed(true)),
      Effect.map((deleted): AppMessage => ({ _tag: "Removed", opId: op.opId, sandboxId: op.sandboxId, deleted }))
    )

  const observeOne = (orgId: OrgId, replica: { readonly sandboxId: string; readonly pid: string | null }) =>
    Effect.gen(function*() {
      const found = yield* sandboxes.get(orgId, replica.sandboxId).pipe(
        Effect.map((s) => ({ state: s.state, reason: s.stopReason })),
        Effect.catchTag("NotFound", () => Effect.succeed({ state: "missing" as const, reason: null }))
      )
      const sandbox = found.state
      if (sandbox !== "running" || replica.pid === null) {
        return {
          sandboxId: replica.sandboxId,
          sandbox,
          pid: replica.pid,
          process: "none",
          reason: found.reason
        } satisfies ObservedReplica
      }
      const process = yield* processes.get(orgId, replica.sandboxId, replica.pid).pipe(
        Effect.map((p) => (p.state === "running" ? "running" as const : "exited" as const)),
        // The host no longer knows the process (its agent restarted: its processes ended).
        Effect.catchTag("NotFound", () => Effect.succeed("exited" as const)),
        Effect.catchIf((e) => !isInfrastructure(e), () => Effect.succeed("unknown" as const))
      )
      return { sandboxId: replica.sandboxId, sandbox, pid: replica.pid, process } satisfies ObservedReplica
    })

  const perform = (op: AppOperation): Effect.Effect<AppMessage, Rows.QueryError> => {
    switch (op._tag) {
      case "CreateReplica":
        return createReplica(op)
      case "LaunchCmd":
        return launchCmd(op)
      case "RemoveReplica":
        return removeReplica(op)
      case "Observe":
        return Effect.map(
          Effect.forEach(op.replicas, (r) => observeOne(op.orgId as OrgId, r), { concurrency: 4 }),
          (replicas): AppMessage => ({ _tag: "Observed", opId: op.opId, replicas })
        )
    }
  }

  const handle = (msg: JsMsg) =>
    Effect.gen(function*() {
      const op = yield* decodeOperation(new TextDecoder().decode(msg.data)).pipe(Effect.option)
      if (op._tag === "None") {
        yield* Effect.logWarning("apps: an operation that cannot be read, dropped", { subject: msg.subject })
        msg.term()
        return
      }
      const outcome = yield* perform(op.value)
      yield* Actors.send(AppActor, op.value.appId, outcome, { msgID: `result:${op.value.opId}` })
      msg.ack()
    }).pipe(
      Effect.catchCause((cause) =>
        Effect.andThen(
          Effect.logWarning("apps: an operation failed, it will be tried again", { cause: String(cause) }),
          Effect.sync(() => msg.nak(2_000))
        )
      )
    )

  return yield* Effect.gen(function*() {
    const consumer = yield* Effect.tryPromise({
      try: () => nats.js.consumers.get(stream, nats.name(APP_OPS_CONSUMER)),
      catch: (cause) => new BusError({ operation: `consumer ${APP_OPS_CONSUMER}`, message: String(cause) })
    })
    const messages = yield* consumeScoped(consumer, `consume ${APP_OPS_CONSUMER}`, { max_messages: CONCURRENCY * 2 })
    yield* Stream.fromAsyncIterable(
      messages,
      (cause) => new BusError({ operation: "consume app operations", message: String(cause) })
    ).pipe(Stream.mapEffect(handle, { concurrency: CONCURRENCY, unordered: true }), Stream.runDrain)
  }).pipe(
    Effect.scoped,
    Effect.tapCause((cause) => Effect.logWarning("apps: executor stopped, restarting", { cause: String(cause) })),
    Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(200)), Schedule.spaced(Duration.seconds(5))])),
    Effect.ignore,
    Effect.forever
  )
})
