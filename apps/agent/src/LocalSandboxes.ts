/**
 * This host's sandboxes: applies control-plane commands to them through the driver and says
 * what happened as an `AgentReport`; at start-up, reconciles the journal with the disk; and
 * checks the sandboxes it reported running for an init that died (`checkExits`, polled by
 * `Watcher.ts`), which it reports `exited` with the reason.
 *
 * This file is the I/O: what a command does is decided by `LocalSandboxes/Decision.ts` (pure,
 * its table there) and carried out here; the warm pool, the readiness checks and the exit checks
 * are `LocalSandboxes/Pool.ts`, `Readiness.ts` and `Exits.ts`, reconcile's plan `Reconcile.ts`.
 *
 * One sandbox's command and its exit check never run at once (a lock per sandbox), and each
 * report's `at` is taken under that lock: the actor, which keeps only the newest report, ends
 * with what the host did last.
 *
 * Every command is idempotent: a redelivered create of a sandbox that exists reports its
 * state, stop of a stopped sandbox reports `stopped`, destroy of an unknown one `destroyed`.
 * The only error is the journal's (the host's disk): the caller retries the command in place.
 */
import { openEnv } from "@svc/crypto/SealedEnv"
import { SecretBox } from "@svc/crypto/SecretBox"
import type { PoolEntry } from "@svc/host-protocol/Pools"
import type { AgentCommand, AgentReport } from "@svc/host-protocol/Protocol"
import {
  DriverFailure,
  DriverSandboxId,
  type ImageRoot,
  SandboxDriver,
  type SandboxDriverError,
  type SandboxInfo,
  SandboxSpec
} from "@svc/host/Driver"
import { Clock, Context, Duration, Effect, Layer, Schema, Semaphore } from "effect"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { AgentConfig } from "./Config.ts"
import { Journal, JournalEntry, type JournalError, type PendingOp } from "./Journal.ts"
import { type Action, decide, missingLimits, type Observation, type SandboxState } from "./LocalSandboxes/Decision.ts"
import { describeDriverError, tenantMessage } from "./LocalSandboxes/DriverErrors.ts"
import { makeExits } from "./LocalSandboxes/Exits.ts"
import { makePool, POOL_PREFIX, type PoolStatus } from "./LocalSandboxes/Pool.ts"
import { makeReadiness, type RuntimeFields } from "./LocalSandboxes/Readiness.ts"
import { reportOf } from "./LocalSandboxes/Report.ts"
import { makeRuntimes } from "./LocalSandboxes/Runtimes.ts"
import { plan } from "./Reconcile.ts"
import { Reporter } from "./Reporter.ts"
import { TemplateImages } from "./TemplateImages.ts"

export { describeDriverError, tenantMessage } from "./LocalSandboxes/DriverErrors.ts"
export { poolMakers, type PoolStatus } from "./LocalSandboxes/Pool.ts"

const isSandboxId = Schema.is(DriverSandboxId)

/**
 * A fork snapshot no sandbox stacks is kept this long after it was made: the fork request that
 * made it has its creates on the way (the API takes the snapshot before it inserts them).
 */
const FORK_LAYER_GRACE_MS = 20_000
const FORK_SWEEP_MS = 10_000

export class LocalSandboxes extends Context.Service<LocalSandboxes, {
  apply(command: AgentCommand): Effect.Effect<AgentReport, JournalError>
  /**
   * Undoes unfinished operations, destroys orphans, and returns one report per settled sandbox
   * (its real state) for the caller to publish. Run before commands are consumed.
   */
  readonly reconcile: Effect.Effect<ReadonlyArray<AgentReport>, JournalError | DriverFailure>
  /** The warm pools (for tests, logs and the host record): their ready entries, and how many are being made. */
  readonly pool: Effect.Effect<PoolStatus>
  /**
   * Keeps a template's warm pool as its `pools` KV entry says (`Pools.ts`): its image made ready
   * on this host, then `size` entries booted; a changed image drains the old ones. An entry that
   * cannot be prepared (a layer that cannot be pulled, an env that cannot be opened) fails.
   */
  setPool(entry: PoolEntry): Effect.Effect<void, string>
  /** Drains and forgets a template's warm pool. */
  dropPool(templateId: string): Effect.Effect<void>
  /**
   * Checks every sandbox reported running (a sandbox busy with a command is skipped until the
   * next check): one whose init died is ended by the driver and reported `exited` with why.
   */
  readonly checkExits: Effect.Effect<ReadonlyArray<AgentReport>>
  /** The sandboxes last reported running (what `checkExits` watches), for their samples and logs. */
  readonly running: Effect.Effect<ReadonlyArray<string>>
  /**
   * The sandboxes whose init `checkExits` found dead since the last call (each once), for the
   * line saying how: one that died within a round of its start was never among `running` there.
   */
  readonly takeEnded: Effect.Effect<ReadonlyArray<string>>
}>()("@svc/agent/LocalSandboxes") {
  static readonly layer = Layer.effect(
    LocalSandboxes,
    Effect.gen(function*() {
      const config = yield* AgentConfig
      const driver = yield* SandboxDriver
      const journal = yield* Journal
      const box = yield* SecretBox
      const images = yield* TemplateImages
      const reporter = yield* Reporter
      const hostId = config.hostId
      const runtimes = makeRuntimes(config.dataDir)
      const report = reportOf(hostId)

      const locks = new Map<string, Semaphore.Semaphore>()
      const lockOf = (sandboxId: string) => {
        let lock = locks.get(sandboxId)
        if (lock === undefined) {
          lock = Semaphore.makeUnsafe(1)
          locks.set(sandboxId, lock)
        }
        return lock
      }
      // Sandboxes last reported running: what `checkExits` watches.
      const exits = makeExits({ driver, lockOf, report })
      const { track } = exits
      const readiness = yield* makeReadiness({
        hostId,
        driver,
        runtimes,
        reporter,
        lockOf,
        isRunning: exits.isRunning,
        report
      })

      /** A create or start without one of the host's limits is undone and fails (`missingLimits`). */
      const limited = <E>(started: Effect.Effect<SandboxInfo, E>, undo: Effect.Effect<void>) =>
        Effect.flatMap(started, (info): Effect.Effect<SandboxInfo, E | DriverFailure> => {
          const missing = missingLimits(info, config.allowUnlimited)
          if (missing.length === 0) return Effect.succeed(info)
          return Effect.andThen(
            undo,
            Effect.fail(
              new DriverFailure({ operation: "limits", message: `the host could not apply ${missing.join("; ")}` })
            )
          )
        })

      const pool = yield* makePool({
        size: config.poolSize,
        driver,
        probe: readiness.probe,
        warm: readiness.warm,
        limited
      })

      const failed = (sandboxId: string, errorMessage: string) => report(sandboxId, "failed", { errorMessage })

      /** Removes fork snapshots no sandbox stacks (after each destroy, and every `FORK_SWEEP_MS`). */
      const sweepForks = driver.sweepForkLayers(FORK_LAYER_GRACE_MS).pipe(
        Effect.tap((removed) =>
          removed.length > 0 ? Effect.logInfo("agent: fork snapshots released", { layers: removed }) : Effect.void
        ),
        Effect.catch((e) =>
          Effect.logWarning("agent: sweeping fork snapshots failed", { error: describeDriverError(e) })
        )
      )
      yield* Effect.forkScoped(
        Effect.forever(Effect.andThen(Effect.sleep(Duration.millis(FORK_SWEEP_MS)), sweepForks))
      )

      const mark = (sandboxId: string, orgId: string, pending: PendingOp | null) =>
        Effect.flatMap(
          Clock.currentTimeMillis,
          (now) => journal.put(new JournalEntry({ sandboxId, orgId, pending, updatedAt: now }))
        )

      /** The loop devices of a running sandbox's volumes, for its `running` report (none: omitted). */
      const volumeDevices = (sandboxId: string) =>
        driver.volumeDevices(sandboxId).pipe(
          Effect.map((devices) => (Object.keys(devices).length > 0 ? { volumeDevices: { ...devices } } : {})),
          Effect.orElseSucceed(() => ({}))
        )

      /**
       * The roots made ready on this host, by name: a root, once extracted, stays (nothing
       * removes one while the agent runs), so a template's creates after the first skip the
       * driver's look at the archive and the folder (tens of ms on a loaded host, on every
       * pooled create's path before).
       */
      const preparedRoots = new Map<string, string>()
      const prepareRoot = (root: ImageRoot) =>
        Effect.suspend(() => {
          const known = preparedRoots.get(root)
          if (known !== undefined) return Effect.succeed(known)
          return driver.prepareRoot(root).pipe(Effect.tap((name) => Effect.sync(() => preparedRoots.set(root, name))))
        })

      /**
       * A create's preparation: the env opened (in memory only: the driver keeps it sealed on
       * disk), a template's image made ready (its root made here and its layers pulled, before the
       * driver stacks them), and the driver's spec decoded. A refusal in words, for the report.
       */
      const prepare = (command: Extract<AgentCommand, { _tag: "create" }>) =>
        Effect.gen(function*() {
          const { sandboxId, resources: { image, sealedEnv, ...resources } } = command
          const env = yield* Effect.result(openEnv(box, "transit", sandboxId, sealedEnv))
          if (env._tag === "Failure") return yield* Effect.fail(`the sandbox's env: ${env.failure.message}`)
          let template = resources.template
          if (image !== undefined) {
            const prepared = yield* Effect.result(
              Effect.gen(function*() {
                const root = yield* prepareRoot(
                  resources.template === "debian" || resources.template === "code" ? resources.template : "base"
                ).pipe(
                  Effect.mapError((e) => describeDriverError(e))
                )
                yield* images.ensureLayers(image.layers).pipe(Effect.mapError((e) => e.message))
                return root
              })
            )
            if (prepared._tag === "Failure") {
              yield* Effect.logWarning("agent: a template's image could not be prepared", {
                sandboxId,
                error: prepared.failure
              })
              return yield* Effect.fail("the template's image could not be prepared on this host")
            }
            template = prepared.success
            yield* runtimes.save(sandboxId, { startCmd: image.startCmd, readyCmd: image.readyCmd })
          }
          const { forkOf, templateId: _templateId, ...driverResources } = resources
          return yield* Schema.decodeUnknownEffect(SandboxSpec)({
            sandboxId,
            ...driverResources,
            // A fork stacks its source's snapshot over the source's own folders, with its env (`Forks.ts`).
            ...(forkOf !== undefined ? { forkOf: { sandboxId: forkOf.sandboxId, layer: forkOf.snapshot } } : {}),
            template,
            ...(image !== undefined && image.layers.length > 0 ? { layers: image.layers } : {}),
            ...(image?.workdir != null ? { workdir: image.workdir } : {}),
            ...(image?.user != null ? { user: image.user } : {}),
            env: env.success
          }).pipe(Effect.mapError((e) => `invalid sandbox spec: ${e.message}`))
        })

      /**
       * Carries out a command's actions as `decide` says, one decision after another: each
       * decision's last action answers (the command's report) or observes (its outcome decided on
       * next). What one action learns for a later one (the spec, the probe, the boot) is kept here.
       */
      const run = (command: AgentCommand): Effect.Effect<AgentReport, JournalError> =>
        Effect.gen(function*() {
          const { orgId, sandboxId } = command
          const entry = yield* journal.get(sandboxId)
          const state: SandboxState = {
            entry: entry === undefined ? "none" : entry.pending === null ? "settled" : "pending"
          }
          let spec: SandboxSpec | undefined
          let agentReady = false
          let runtime: RuntimeFields = {}
          const specOf = () => {
            if (spec === undefined) throw new Error("a driver step before the create's preparation")
            return spec
          }
          /** One action: its report when it answers, its outcome when it observes. */
          const perform = (
            action: Action
          ): Effect.Effect<
            { readonly answer: AgentReport } | { readonly observed: Observation } | undefined,
            JournalError
          > => {
            switch (action._tag) {
              case "Prepare":
                return command._tag === "create"
                  ? prepare(command).pipe(
                    Effect.match({
                      onFailure: (message): Observation => ({ _tag: "NotPrepared", message }),
                      onSuccess: (prepared): Observation => {
                        spec = prepared
                        return { _tag: "Prepared" }
                      }
                    }),
                    Effect.map((observed) => ({ observed }))
                  )
                  : Effect.die(new Error(`${command._tag} has nothing to prepare`))
              case "List":
                return Effect.map(driver.list.pipe(Effect.orElseSucceed(() => [])), (listing) => {
                  const row = listing.find((r) => r.sandboxId === sandboxId)
                  return {
                    observed: {
                      _tag: "Listed",
                      reason: action.reason,
                      listing: row === undefined
                        ? { _tag: "Absent" }
                        : row.status === "stopped"
                        ? { _tag: "Stopped" }
                        : { _tag: "Running", internalIp: row.internalIp }
                    }
                  }
                })
              case "Adopt":
                return Effect.map(
                  command._tag === "create" ? pool.adopt(specOf(), command.resources.templateId) : Effect.undefined,
                  (adopted): { readonly observed: Observation } => {
                    if (adopted === undefined) return { observed: { _tag: "NotAdopted" } }
                    // An entry answered its probe when it was made; a template pool's passed its ready_cmd too.
                    agentReady = true
                    if (adopted.booted) runtime = { runtimeReady: true, runtimeReason: null }
                    return {
                      observed: { _tag: "Adopted", internalIp: adopted.info.internalIp, booted: adopted.booted }
                    }
                  }
                )
              case "Drive": {
                const step = action.step
                switch (step) {
                  case "create":
                  case "start":
                    return Effect.map(
                      Effect.result(
                        step === "create"
                          ? limited<SandboxDriverError>(
                            driver.create(specOf()),
                            Effect.ignore(driver.destroy(sandboxId))
                          )
                          : limited<SandboxDriverError>(driver.start(sandboxId), Effect.void)
                      ),
                      (made) => {
                        // Up only once its init wrote the ready byte: what `agent_ready` stands for (Decision.ts).
                        if (made._tag === "Success") agentReady = true
                        return {
                          observed: made._tag === "Success"
                            ? { _tag: "Up", step, internalIp: made.success.internalIp }
                            : { _tag: "Refused", step, error: made.failure }
                        }
                      }
                    )
                  case "stop":
                  case "destroy":
                    return Effect.map(
                      Effect.result(step === "stop" ? driver.stop(sandboxId) : driver.destroy(sandboxId)),
                      (done) => ({
                        observed: done._tag === "Success"
                          ? { _tag: "Done", step }
                          : { _tag: "Refused", step, error: done.failure }
                      })
                    )
                }
              }
              case "Mark":
                return Effect.as(mark(sandboxId, orgId, action.pending), undefined)
              case "Forget":
                return Effect.as(journal.remove(sandboxId), undefined)
              case "ForgetRuntime":
                // A fork's snapshot goes once no fork on this host stacks it.
                return Effect.as(Effect.andThen(runtimes.remove(sandboxId), sweepForks), undefined)
              case "StopQuietly":
                return Effect.as(Effect.ignore(driver.stop(sandboxId)), undefined)
              case "Probe":
                return Effect.map(readiness.probe(sandboxId), (ready) => {
                  agentReady = ready
                  return undefined
                })
              case "Boot":
                return Effect.map(readiness.boot(sandboxId, agentReady), (fields) => {
                  runtime = fields
                  return undefined
                })
              case "ReportRunning":
                return Effect.gen(function*() {
                  const volumes = action.volumes ? yield* volumeDevices(sandboxId) : {}
                  return {
                    answer: yield* report(sandboxId, "running", {
                      internalIp: action.internalIp,
                      via: action.via,
                      agentReady: action.agentReady === true ? true : agentReady,
                      ...(action.runtime ? runtime : {}),
                      ...volumes
                    })
                  }
                })
              case "Report":
                return Effect.map(report(sandboxId, action.status), (answer) => ({ answer }))
              case "Fail":
                return Effect.map(failed(sandboxId, action.message), (answer) => ({ answer }))
              case "FailBy":
                // A command the driver refused: the details to this host's log, tenant-safe words in the report.
                return Effect.andThen(
                  Effect.logWarning("agent: command failed", { sandboxId, error: describeDriverError(action.error) }),
                  Effect.map(failed(sandboxId, tenantMessage(action.error)), (answer) => ({ answer }))
                )
            }
          }
          let observation: Observation = { _tag: "Received" }
          while (true) {
            let next: Observation | undefined
            for (const action of decide(state, command, observation)) {
              const outcome = yield* perform(action)
              if (outcome === undefined) continue
              if ("answer" in outcome) return outcome.answer
              next = outcome.observed
            }
            if (next === undefined) return yield* Effect.die(new Error(`${command._tag}: a decision without an end`))
            observation = next
          }
        }).pipe(Effect.withSpan(`LocalSandboxes.${command._tag}`))

      const apply = (command: AgentCommand): Effect.Effect<AgentReport, JournalError> => {
        // The journal names files after the id: refuse what the driver's grammar refuses.
        if (!isSandboxId(command.sandboxId)) return failed(command.sandboxId, "invalid sandbox id")
        return lockOf(command.sandboxId).withPermit(
          Effect.map(run(command), (sent) => track(command._tag, sent))
        )
      }

      const reconcile = Effect.gen(function*() {
        const entries = yield* journal.list
        // A pool entry whose create was cut by a crash is not listed by the driver (no record
        // yet) but has a folder, perhaps processes: pool entries never outlive their agent.
        const halfMade = yield* Effect.promise(() =>
          Fs.readdir(NodePath.join(config.dataDir, "sandboxes")).catch(() => [] as Array<string>)
        )
        yield* Effect.forEach(
          halfMade.filter((name) => name.startsWith(POOL_PREFIX)),
          (id) => Effect.ignore(driver.destroy(id)),
          {
            discard: true
          }
        )
        const listing = yield* driver.list
        const reports: Array<AgentReport> = []
        for (const action of plan(entries, listing)) {
          switch (action._tag) {
            case "Undo": {
              yield* Effect.logWarning("agent: undoing an unfinished operation", {
                sandboxId: action.sandboxId,
                pending: action.pending
              })
              const undone = yield* Effect.result(
                action.by === "destroy" ? driver.destroy(action.sandboxId) : driver.stop(action.sandboxId)
              )
              if (undone._tag === "Failure" && undone.failure._tag !== "SandboxNotFound") {
                // Keep the entry: the next start tries again; the command's redelivery may too.
                yield* Effect.logError("agent: undo failed", {
                  sandboxId: action.sandboxId,
                  error: describeDriverError(undone.failure)
                })
                break
              }
              if (action.by === "destroy" || undone._tag === "Failure") yield* journal.remove(action.sandboxId)
              else {
                const entry = entries.find((e) => e.sandboxId === action.sandboxId)!
                yield* mark(action.sandboxId, entry.orgId, null)
              }
              break
            }
            case "DestroyOrphan": {
              yield* Effect.logWarning("agent: destroying a sandbox no command confirmed", {
                sandboxId: action.sandboxId
              })
              const destroyed = yield* Effect.result(driver.destroy(action.sandboxId))
              if (destroyed._tag === "Failure") {
                yield* Effect.logError("agent: orphan destroy failed", {
                  sandboxId: action.sandboxId,
                  error: describeDriverError(destroyed.failure)
                })
              }
              break
            }
            case "Report": {
              if (action.status === "stopped") {
                // Stopped by a command, or its init died (perhaps while no agent watched): say which.
                const exit = yield* driver.ended(action.sandboxId).pipe(Effect.orElseSucceed(() => undefined))
                reports.push(
                  exit === undefined
                    ? yield* report(action.sandboxId, "stopped")
                    : yield* report(action.sandboxId, "exited", { errorMessage: exit.reason })
                )
              } else {
                const agentReady = yield* readiness.probe(action.sandboxId)
                reports.push(
                  track(
                    "reconcile",
                    yield* report(action.sandboxId, "running", {
                      internalIp: action.internalIp,
                      agentReady,
                      ...(yield* volumeDevices(action.sandboxId))
                    })
                  )
                )
              }
              break
            }
            case "Vanished": {
              yield* journal.remove(action.sandboxId)
              yield* Effect.logWarning("agent: a sandbox is gone from the disk", { sandboxId: action.sandboxId })
              reports.push(yield* report(action.sandboxId, "destroyed"))
              break
            }
          }
        }
        yield* pool.fill
        return reports
      }).pipe(Effect.withSpan("LocalSandboxes.reconcile"))

      const setPool = (entry: PoolEntry) =>
        Effect.gen(function*() {
          if (entry.size === 0) return yield* pool.removeTemplate(entry.templateId)
          const env = yield* openEnv(box, "transit", entry.templateId, entry.sealedEnv).pipe(
            Effect.mapError((e) => `the template's env: ${e.message}`)
          )
          const template = yield* prepareRoot(entry.root).pipe(Effect.mapError(describeDriverError))
          yield* images.ensureLayers(entry.layers).pipe(Effect.mapError((e) => e.message))
          const image = {
            template,
            layers: entry.layers,
            env,
            startCmd: entry.startCmd,
            readyCmd: entry.readyCmd
          }
          // Entries of another image or other commands are drained; a size change alone keeps them.
          // (The env opened: each seal of the same env differs.)
          const version = JSON.stringify([entry.root, entry.layers, env, entry.startCmd, entry.readyCmd])
          yield* pool.setTemplate(entry.templateId, { size: entry.size, version, image })
        }).pipe(Effect.withSpan("LocalSandboxes.setPool"))

      return LocalSandboxes.of({
        apply,
        reconcile,
        pool: pool.status,
        checkExits: exits.checkExits,
        running: exits.runningIds,
        takeEnded: exits.takeEnded,
        setPool,
        dropPool: pool.removeTemplate
      })
    })
  )
}
