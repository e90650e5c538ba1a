/**
 * Applies control-plane commands to this host's sandboxes through the driver and says what
 * happened as an `AgentReport`; at start-up, reconciles the journal with the disk; and checks
 * the sandboxes it reported running for an init that died (`checkExits`, polled by
 * `Watcher.ts`), which it reports `exited` with the reason.
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
import type { AgentCommand, AgentReport } from "@svc/host-protocol/Protocol"
import {
  DriverExecRequest,
  DriverFailure,
  DriverSandboxId,
  SandboxDriver,
  type SandboxDriverError,
  type SandboxInfo,
  SandboxSpec
} from "@svc/host/Driver"
import { BASE_TEMPLATE } from "@svc/host/Rootfs"
import { Clock, Context, Duration, Effect, FiberSet, Layer, Option, Queue, Schedule, Schema, Semaphore } from "effect"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { AgentConfig } from "./Config.ts"
import { Images } from "./Images.ts"
import { Journal, JournalEntry, type JournalError, type PendingOp } from "./Journal.ts"
import { plan } from "./Reconcile.ts"
import { Reporter } from "./Reporter.ts"

/** How long a boot waits for a template's `ready_cmd` to pass before reporting it not ready. */
const READY_WAIT_MS = 30_000

/** Starts `$1` detached from the exec (its own session, output to a log), so it outlives it. */
const START_SCRIPT = `mkdir -p /var/log; setsid /bin/sh -c "$1" </dev/null >>/var/log/svc-start.log 2>&1 & echo started`

const tail = (text: string) => {
  const line = text.trim().split("\n").at(-1)?.slice(0, 200) ?? ""
  return line.length > 0 ? `: ${line}` : ""
}

const RuntimeJson = Schema.fromJsonString(Schema.Struct({
  startCmd: Schema.NullOr(Schema.String),
  readyCmd: Schema.NullOr(Schema.String)
}))

/**
 * A template sandbox's start and ready commands, kept by the agent (`agent/runtime/<id>.json`)
 * from its create for each later start.
 */
const makeRuntimes = (dataDir: string) => {
  const dir = NodePath.join(dataDir, "agent", "runtime")
  const file = (sandboxId: string) => NodePath.join(dir, `${sandboxId}.json`)
  return {
    save: (sandboxId: string, runtime: { readonly startCmd: string | null; readonly readyCmd: string | null }) =>
      Effect.promise(async () => {
        await Fs.mkdir(dir, { recursive: true, mode: 0o700 })
        await Fs.writeFile(file(sandboxId), Schema.encodeSync(RuntimeJson)(runtime), { mode: 0o600 })
      }),
    // Read at every cold boot, absent for most: synchronously, as the journal (a small file, no thread-pool hop).
    load: (sandboxId: string) =>
      Effect.sync(() => {
        let text: string
        try {
          text = FsSync.readFileSync(file(sandboxId), "utf8")
        } catch {
          return undefined
        }
        return Schema.decodeUnknownSync(RuntimeJson)(text)
      }),
    remove: (sandboxId: string) => Effect.promise(() => Fs.rm(file(sandboxId), { force: true }))
  }
}

const MAX_ERROR_MESSAGE = 1000

/**
 * A driver refusal in the words a tenant may read, for the sandbox's `errorMessage`: which
 * step failed, never the driver's own message (it can hold host paths, a bubblewrap log tail,
 * the host's subnet). `describeDriverError` is the full story, for this host's log.
 */
export const tenantMessage = (error: SandboxDriverError): string => {
  switch (error._tag) {
    case "InvalidSandboxRequest":
      return "the host refused the sandbox's parameters"
    case "SandboxNotFound":
      return "no such sandbox on this host"
    case "SandboxAlreadyExists":
      return "the sandbox exists already"
    case "SandboxNotRunning":
      return "the sandbox is not running"
    case "TemplateNotFound":
      return `template ${error.template} is not available on this host`
    case "SandboxCapacityExhausted":
      return "the host is out of capacity"
    case "SandboxFileError":
      return `a file operation failed (${error.reason.replaceAll("_", " ")})`
    case "ProcessRefused":
      return `a background process was refused (${error.reason.replaceAll("_", " ")})`
    case "DriverUnsupported":
      return `${error.operation} is not supported on this host`
    case "DriverFailure":
      return `${error.operation} failed on the host`
  }
}

/** A driver refusal in words, with the driver's details: for the host's log only. */
export const describeDriverError = (error: SandboxDriverError): string => {
  const text = (() => {
    switch (error._tag) {
      case "InvalidSandboxRequest":
        return `invalid request: ${error.message}`
      case "SandboxCapacityExhausted":
        return `host out of capacity: ${error.message}`
      case "SandboxFileError":
        return `${error.path}: ${error.message}`
      case "DriverUnsupported":
      case "DriverFailure":
        return `${error.operation} failed: ${error.message}`
      default:
        // Nothing more to tell the host's log than the tenant.
        return tenantMessage(error)
    }
  })()
  return text.length > MAX_ERROR_MESSAGE ? text.slice(0, MAX_ERROR_MESSAGE - 1) + "…" : text
}

const isSandboxId = Schema.is(DriverSandboxId)

/**
 * Warm pool entries are driver sandboxes named `pool-<hex>` (platform ids are `sbx_...`, so the
 * two never meet). They have no journal entry: a restarted agent's reconcile destroys them as
 * orphans and the pool is made again; a graceful stop destroys them.
 */
const POOL_PREFIX = "pool-"
/** The platform's default disk: an entry's disk image is not resized when it is adopted. */
const POOL_DISK_GB = 1
const poolEntrySpec = (sandboxId: string) =>
  new SandboxSpec({
    sandboxId,
    template: BASE_TEMPLATE,
    env: {},
    cpu: 1,
    ramMb: 256,
    diskGb: POOL_DISK_GB,
    exposedPorts: []
  })

export interface PoolStatus {
  readonly ready: ReadonlyArray<string>
  readonly making: number
}

/**
 * How many pool entries are made at once. Making one is CPU work (process starts, namespaces,
 * cgroup and veth writes: ~60 ms of it here), so one core is left to the creates being served:
 * on a 2-core host two makers kept the pool full but raised create → running p50 by ~5 ms
 * (bench/sandboxes.ts, six alternating runs), so there it is one; bigger hosts refill side by
 * side. Never more than the pool's size.
 */
export const poolMakers = (poolSize: number) => Math.max(1, Math.min(poolSize, Os.availableParallelism() - 1))

export class Lifecycle extends Context.Service<Lifecycle, {
  apply(command: AgentCommand): Effect.Effect<AgentReport, JournalError>
  /**
   * Undoes unfinished operations, destroys orphans, and returns one report per settled sandbox
   * (its real state) for the caller to publish. Run before commands are consumed.
   */
  readonly reconcile: Effect.Effect<ReadonlyArray<AgentReport>, JournalError | DriverFailure>
  /** The warm pool (for tests and logs): driver ids of its ready entries, and how many are being made. */
  readonly pool: Effect.Effect<PoolStatus>
  /**
   * Checks every sandbox reported running (a sandbox busy with a command is skipped until the
   * next check): one whose init died is ended by the driver and reported `exited` with why.
   */
  readonly checkExits: Effect.Effect<ReadonlyArray<AgentReport>>
}>()("@svc/agent/Lifecycle") {
  static readonly layer = Layer.effect(
    Lifecycle,
    Effect.gen(function*() {
      const config = yield* AgentConfig
      const driver = yield* SandboxDriver
      const journal = yield* Journal
      const box = yield* SecretBox
      const images = yield* Images
      const reporter = yield* Reporter
      const readinessChecks = yield* FiberSet.make<void, never>()
      const hostId = config.hostId
      const runtimes = makeRuntimes(config.dataDir)

      // The warm pool. Each missing entry is one item in `wanted`: one per slot when reconcile has
      // run (before, reconcile would destroy entries as orphans), one more for each entry taken.
      // `poolMakers` fibers take items and make entries, so ready + being made + wanted is always
      // the pool's size: refills run side by side and never overshoot. A create never waits for
      // them: it takes a ready entry or cold-boots.
      // Sandboxes last reported running: what `checkExits` watches.
      const running = new Set<string>()
      const locks = new Map<string, Semaphore.Semaphore>()
      const lockOf = (sandboxId: string) => {
        let lock = locks.get(sandboxId)
        if (lock === undefined) {
          lock = Semaphore.makeUnsafe(1)
          locks.set(sandboxId, lock)
        }
        return lock
      }
      /** Keeps `running` as the reports say: the sandboxes whose init should be alive. */
      const track = (command: AgentCommand["_tag"] | "reconcile", report: AgentReport) => {
        if (report.status === "running") running.add(report.sandboxId)
        else if (report.status !== "failed" || command === "create" || command === "start") {
          running.delete(report.sandboxId)
        }
        return report
      }

      /**
       * A sandbox that came up without one of its limits (the host's cgroups refused a write the
       * start-up probe made) is undone and its command fails, unless the operator allowed
       * unlimited sandboxes: the host's limits hold for each sandbox, not only at start.
       */
      const limited = <E>(started: Effect.Effect<SandboxInfo, E>, undo: Effect.Effect<void>) =>
        Effect.flatMap(started, (info): Effect.Effect<SandboxInfo, E | DriverFailure> => {
          const missing = (["memory", "cpu", "pids"] as const)
            .filter((name) => info.limits[name] !== "applied")
            .map((name) => `${name}: ${info.limits[name]}`)
          if (missing.length === 0 || config.allowUnlimited) return Effect.succeed(info)
          return Effect.andThen(
            undo,
            Effect.fail(
              new DriverFailure({ operation: "limits", message: `the host could not apply ${missing.join("; ")}` })
            )
          )
        })

      const pool: Array<string> = []
      let making = 0
      let poolStarted = false
      const wanted = yield* Queue.unbounded<void>()
      // Uninterruptible from its start to `pool.push`: an entry made is always either in `pool`
      // (where the finalizer finds it) or destroyed.
      const makePoolEntry = Effect.uninterruptible(
        Effect.gen(function*() {
          const id = `${POOL_PREFIX}${randomBytes(8).toString("hex")}`
          making++
          const made = yield* Effect.result(
            Effect.gen(function*() {
              yield* driver.create(poolEntrySpec(id))
              if (!(yield* checkReady(id))) return yield* Effect.fail("the pool entry did not answer")
            }).pipe(
              // A create that failed half-way can leave a folder behind: nothing of it may stay.
              Effect.onError(() => Effect.ignore(driver.destroy(id)))
            )
          )
          // In one step: the status never counts the entry twice or not at all.
          making--
          if (made._tag === "Success") pool.push(id)
          return made
        })
      )
      const maker = Effect.forever(
        Effect.gen(function*() {
          yield* Queue.take(wanted)
          const made = yield* makePoolEntry
          if (made._tag === "Failure") {
            yield* Effect.logWarning("agent: could not make a warm pool entry", { error: String(made.failure) })
            yield* Effect.sleep(Duration.seconds(1))
            // The slot is still empty: try again.
            Queue.offerUnsafe(wanted, undefined)
          }
        })
      )
      if (config.poolSize > 0) {
        // Registered first so it runs last: after the makers (and the entries they are making,
        // uninterruptibly) ended, every entry is in `pool`.
        yield* Effect.addFinalizer(() =>
          Effect.forEach(pool.splice(0), (id) => Effect.ignore(driver.destroy(id)), { concurrency: 4, discard: true })
        )
        // One fiber for all makers: closing the scope interrupts them together, so none starts
        // another entry while the others are being stopped.
        const makers = poolMakers(config.poolSize)
        yield* Effect.forkScoped(
          Effect.forEach(Array.from({ length: makers }), () => maker, { concurrency: makers, discard: true })
        )
      }
      /**
       * Gives a ready entry (only `base` sandboxes of the entries' disk size are pooled) the spec's
       * identity, if there is one.
       * Uninterruptible from the take on: a taken entry is adopted or destroyed, never dropped
       * where the stop's finalizer (which sees only the pool) would miss it. Its slot is refilled
       * once the adoption is over, so that the new entry's process starts do not compete with it.
       */
      const adoptPoolEntry = (spec: SandboxSpec) =>
        Effect.uninterruptible(Effect.suspend(() => {
          // A pool entry runs already: volumes are mounted as a sandbox starts, so those cold-boot.
          const poolId = spec.template === BASE_TEMPLATE && spec.layers === undefined && spec.diskGb === POOL_DISK_GB &&
              (spec.volumes ?? []).length === 0
            ? pool.shift()
            : undefined
          if (poolId === undefined) return Effect.succeed(undefined)
          return Effect.gen(function*() {
            const adopted = yield* Effect.result(
              limited(driver.adopt(poolId, spec), Effect.ignore(driver.destroy(spec.sandboxId)))
            )
            if (adopted._tag === "Success") return adopted.success
            yield* Effect.logWarning("agent: a warm pool entry could not be used", {
              sandboxId: spec.sandboxId,
              poolId,
              error: describeDriverError(adopted.failure)
            })
            yield* Effect.ignore(driver.destroy(poolId))
            return undefined
          }).pipe(Effect.ensuring(Effect.sync(() => Queue.offerUnsafe(wanted, undefined))))
        }))

      const report = (sandboxId: string, status: AgentReport["status"], fields: Partial<AgentReport> = {}) =>
        Effect.map(Clock.currentTimeMillis, (at): AgentReport => ({
          _tag: "AgentReport",
          sandboxId,
          hostId,
          status,
          ...fields,
          at
        }))

      const failed = (sandboxId: string, errorMessage: string) => report(sandboxId, "failed", { errorMessage })
      /** A command the driver refused: the details to this host's log, tenant-safe words in the report. */
      const failedBy = (sandboxId: string, error: SandboxDriverError) =>
        Effect.andThen(
          Effect.logWarning("agent: command failed", { sandboxId, error: describeDriverError(error) }),
          failed(sandboxId, tenantMessage(error))
        )

      const mark = (sandboxId: string, orgId: string, pending: PendingOp | null) =>
        Effect.flatMap(
          Clock.currentTimeMillis,
          (now) => journal.put(new JournalEntry({ sandboxId, orgId, pending, updatedAt: now }))
        )

      /** `agent_ready`: an exec of `true` succeeds (a few tries: the first may race the init). */
      const checkReady = (sandboxId: string) =>
        driver.exec(sandboxId, new DriverExecRequest({ cmd: ["true"], timeoutMs: 5_000 })).pipe(
          Effect.flatMap((result) => (result.exitCode === 0 ? Effect.succeed(true) : Effect.fail("exit"))),
          Effect.retry({ times: 4, schedule: Schedule.spaced(Duration.millis(25)) }),
          Effect.orElseSucceed(() => false)
        )

      /**
       * A template sandbox's boot (create and start): its `start_cmd` started in the background
       * (its output in /var/log/svc-start.log inside), then its `ready_cmd` tried until it passes
       * (`runtime_ready`) or `READY_WAIT_MS` ran out (`runtime_reason` says the last failure). A
       * sandbox of no template reports nothing about its runtime.
       */
      const boot = (sandboxId: string, agentReady: boolean) =>
        Effect.gen(function*() {
          const runtime = yield* runtimes.load(sandboxId)
          if (runtime === undefined) return {}
          if (!agentReady) return { runtimeReady: false, runtimeReason: "the sandbox does not answer" }
          if (runtime.startCmd !== null) {
            const started = yield* Effect.result(driver.exec(
              sandboxId,
              new DriverExecRequest({
                cmd: ["/bin/sh", "-c", START_SCRIPT, "start", runtime.startCmd],
                timeoutMs: 10_000
              })
            ))
            if (started._tag === "Failure" || started.success.exitCode !== 0) {
              return { runtimeReady: false, runtimeReason: "start_cmd could not be started" }
            }
          }
          if (runtime.readyCmd === null) return { runtimeReady: true, runtimeReason: null }
          // Reported running now; the check goes on beside the commands and reports when it ends.
          yield* FiberSet.run(readinessChecks, checkReadiness(sandboxId, runtime.readyCmd))
          return { runtimeReady: false, runtimeReason: "ready_cmd has not passed yet" }
        })

      /** Tries `ready_cmd` until it passes or `READY_WAIT_MS` ran out, then reports the outcome. */
      const checkReadiness = (sandboxId: string, readyCmd: string) =>
        Effect.gen(function*() {
          // The boot's command holds the lock until it has reported and tracked the sandbox running.
          yield* lockOf(sandboxId).withPermit(Effect.void)
          let reason = "ready_cmd has not passed yet"
          let ready = false
          const deadline = Date.now() + READY_WAIT_MS
          while (Date.now() < deadline && running.has(sandboxId)) {
            const checked = yield* Effect.result(driver.exec(
              sandboxId,
              new DriverExecRequest({ cmd: ["/bin/sh", "-c", readyCmd], timeoutMs: 5_000, maxOutputBytes: 4096 })
            ))
            if (checked._tag === "Success" && checked.success.exitCode === 0) {
              ready = true
              break
            }
            reason = checked._tag === "Failure"
              ? "ready_cmd could not be run"
              : `ready_cmd exited with code ${checked.success.exitCode}${
                tail(Buffer.from(checked.success.stderr).toString("utf8"))
              }`
            yield* Effect.sleep(Duration.millis(250))
          }
          // Under the sandbox's lock: a stop or delete since then is not overtaken by this report.
          yield* lockOf(sandboxId).withPermit(Effect.gen(function*() {
            if (!running.has(sandboxId)) return
            const followUp = yield* report(sandboxId, "running", {
              agentReady: true,
              runtimeReady: ready,
              runtimeReason: ready ? null : reason
            })
            yield* reporter.report(followUp, `ready:${hostId}:${sandboxId}:${followUp.at}`).pipe(
              Effect.retry({ times: 10, schedule: Schedule.spaced(Duration.millis(500)) }),
              Effect.catch((e) =>
                Effect.logWarning("agent: readiness report not sent", { sandboxId, error: String(e) })
              )
            )
          }))
        })

      /** The loop devices of a running sandbox's volumes, for its `running` report (none: omitted). */
      const volumeDevices = (sandboxId: string) =>
        driver.volumeDevices(sandboxId).pipe(
          Effect.map((devices) => (Object.keys(devices).length > 0 ? { volumeDevices: { ...devices } } : {})),
          Effect.orElseSucceed(() => ({}))
        )

      /** The sandbox's current state as a report (for an idempotent repeat of a command). */
      const currentState = Effect.fn("Lifecycle.currentState")(
        function*(sandboxId: string, via: "cold-boot" | "restore") {
          const listing = yield* driver.list.pipe(Effect.orElseSucceed(() => []))
          const row = listing.find((r) => r.sandboxId === sandboxId)
          if (row === undefined) return undefined
          if (row.status === "stopped") return yield* report(sandboxId, "stopped")
          const agentReady = yield* checkReady(sandboxId)
          return yield* report(sandboxId, "running", {
            internalIp: row.internalIp,
            via,
            agentReady,
            ...(yield* volumeDevices(sandboxId))
          })
        }
      )

      const create = Effect.fn("Lifecycle.create")(function*(command: Extract<AgentCommand, { _tag: "create" }>) {
        const { sandboxId, orgId, resources: { image, sealedEnv, ...resources } } = command
        // Opened in memory only: the driver keeps it sealed on disk.
        const env = yield* Effect.result(openEnv(box, "transit", sandboxId, sealedEnv))
        if (env._tag === "Failure") return yield* failed(sandboxId, `the sandbox's env: ${env.failure.message}`)
        // A template's image: its root made here and its layers pulled, before the driver stacks them.
        let template = resources.template
        if (image !== undefined) {
          const prepared = yield* Effect.result(
            Effect.gen(function*() {
              const root = yield* driver.prepareRoot(resources.template === "debian" ? "debian" : "base").pipe(
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
            return yield* failed(sandboxId, "the template's image could not be prepared on this host")
          }
          template = prepared.success
          yield* runtimes.save(sandboxId, { startCmd: image.startCmd, readyCmd: image.readyCmd })
        }
        const spec = yield* Schema.decodeUnknownEffect(SandboxSpec)({
          sandboxId,
          ...resources,
          template,
          ...(image !== undefined && image.layers.length > 0 ? { layers: image.layers } : {}),
          env: env.success
        }).pipe(
          Effect.mapError((e) => e.message),
          Effect.result
        )
        if (spec._tag === "Failure") return yield* failed(sandboxId, `invalid sandbox spec: ${spec.failure}`)
        const entry = yield* journal.get(sandboxId)
        if (entry !== undefined && entry.pending === null) {
          // A repeat (redelivery, or the control plane asking again): say how it is.
          const state = yield* currentState(sandboxId, "cold-boot")
          if (state !== undefined) return state
        }
        yield* mark(sandboxId, orgId, "create")
        // A crash from here on: reconcile destroys `sandboxId` (pending create; `destroy` handles
        // a half-adopted sandbox) and the entry (an orphan); the redelivered create redoes it.
        const adopted = yield* adoptPoolEntry(spec.success)
        if (adopted !== undefined) {
          yield* mark(sandboxId, orgId, null)
          // The entry passed its readiness exec when made and `adopt` found its init alive.
          return yield* report(sandboxId, "running", {
            internalIp: adopted.internalIp,
            via: "restore",
            agentReady: true
          })
        }
        const made = yield* Effect.result(
          limited(driver.create(spec.success), Effect.ignore(driver.destroy(sandboxId)))
        )
        if (made._tag === "Success") {
          const agentReady = yield* checkReady(sandboxId)
          const runtime = yield* boot(sandboxId, agentReady)
          yield* mark(sandboxId, orgId, null)
          return yield* report(sandboxId, "running", {
            internalIp: made.success.internalIp,
            via: "cold-boot",
            agentReady,
            ...runtime,
            ...(yield* volumeDevices(sandboxId))
          })
        }
        if (made.failure._tag === "SandboxAlreadyExists") {
          // On disk without a settled entry: only another process on this data dir could do that.
          yield* mark(sandboxId, orgId, null)
          const state = yield* currentState(sandboxId, "cold-boot")
          if (state !== undefined) return state
        }
        // The driver removed whatever the failed create made.
        yield* journal.remove(sandboxId)
        return yield* failedBy(sandboxId, made.failure)
      })

      const start = Effect.fn("Lifecycle.start")(function*(command: Extract<AgentCommand, { _tag: "start" }>) {
        const { sandboxId, orgId } = command
        if ((yield* journal.get(sandboxId)) === undefined) {
          return yield* failed(sandboxId, "no such sandbox on this host")
        }
        yield* mark(sandboxId, orgId, "start")
        const started = yield* Effect.result(limited(driver.start(sandboxId), Effect.void))
        if (started._tag === "Success") {
          const agentReady = yield* checkReady(sandboxId)
          const runtime = yield* boot(sandboxId, agentReady)
          yield* mark(sandboxId, orgId, null)
          return yield* report(sandboxId, "running", {
            internalIp: started.success.internalIp,
            via: "restore",
            agentReady,
            ...runtime,
            ...(yield* volumeDevices(sandboxId))
          })
        }
        if (started.failure._tag === "SandboxNotFound") {
          yield* journal.remove(sandboxId)
          return yield* failedBy(sandboxId, started.failure)
        }
        // Leave it stopped, not half started.
        yield* Effect.ignore(driver.stop(sandboxId))
        yield* mark(sandboxId, orgId, null)
        return yield* failedBy(sandboxId, started.failure)
      })

      const stop = Effect.fn("Lifecycle.stop")(function*(command: Extract<AgentCommand, { _tag: "stop" }>) {
        const { sandboxId, orgId } = command
        if ((yield* journal.get(sandboxId)) === undefined) {
          return yield* failed(sandboxId, "no such sandbox on this host")
        }
        yield* mark(sandboxId, orgId, "stop")
        const stopped = yield* Effect.result(driver.stop(sandboxId))
        if (stopped._tag === "Failure" && stopped.failure._tag === "SandboxNotFound") {
          yield* journal.remove(sandboxId)
          return yield* failedBy(sandboxId, stopped.failure)
        }
        yield* mark(sandboxId, orgId, null)
        return stopped._tag === "Success"
          ? yield* report(sandboxId, "stopped")
          : yield* failedBy(sandboxId, stopped.failure)
      })

      const destroy = Effect.fn("Lifecycle.destroy")(function*(command: Extract<AgentCommand, { _tag: "destroy" }>) {
        const { sandboxId, orgId } = command
        yield* mark(sandboxId, orgId, "destroy")
        const destroyed = yield* Effect.result(driver.destroy(sandboxId))
        // On failure the entry keeps `pending: destroy`: a restarted agent finishes the job.
        if (destroyed._tag === "Failure") return yield* failedBy(sandboxId, destroyed.failure)
        yield* journal.remove(sandboxId)
        yield* runtimes.remove(sandboxId)
        return yield* report(sandboxId, "destroyed")
      })

      const applyCommand = (command: AgentCommand): Effect.Effect<AgentReport, JournalError> => {
        switch (command._tag) {
          case "create":
            return create(command)
          case "start":
            return start(command)
          case "stop":
            return stop(command)
          case "destroy":
            return destroy(command)
          case "build":
            // Builds are run by `Images` (Commands.ts routes them): never here.
            return failed(command.sandboxId, "a build is not a sandbox command")
        }
      }

      const apply = (command: AgentCommand): Effect.Effect<AgentReport, JournalError> => {
        // The journal names files after the id: refuse what the driver's grammar refuses.
        if (!isSandboxId(command.sandboxId)) return failed(command.sandboxId, "invalid sandbox id")
        return lockOf(command.sandboxId).withPermit(
          Effect.map(applyCommand(command), (report) => track(command._tag, report))
        )
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
          yield* Effect.logWarning("agent: a sandbox's init ended", { sandboxId, reason: exit.success.reason })
          return yield* report(sandboxId, "exited", { errorMessage: exit.success.reason })
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
        Effect.withSpan("Lifecycle.checkExits")
      )

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
                const agentReady = yield* checkReady(action.sandboxId)
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
        if (!poolStarted) {
          poolStarted = true
          for (let i = 0; i < config.poolSize; i++) Queue.offerUnsafe(wanted, undefined)
        }
        return reports
      }).pipe(Effect.withSpan("Lifecycle.reconcile"))

      return Lifecycle.of({ apply, reconcile, pool: Effect.sync(() => ({ ready: [...pool], making })), checkExits })
    })
  )
}
