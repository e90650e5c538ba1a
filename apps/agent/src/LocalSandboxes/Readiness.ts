/**
 * Whether a sandbox is ready: `agent_ready` (of a run the driver has just started: its init's ready
 * byte, `Decision.ts`; of one found running: `probe`, an exec of `true` succeeds) and, for a
 * template's sandbox, `runtime_ready` (`boot`: its `start_cmd` started in the background, then
 * its `ready_cmd` tried beside the commands until it passes or `READY_WAIT_MS` ran out, and the
 * outcome reported on its own).
 */
import type { AgentReport } from "@svc/host-protocol/Protocol"
import { DriverExecRequest, type SandboxDriver } from "@svc/host/Driver"
import { Duration, Effect, FiberSet, Schedule, type Semaphore } from "effect"
import type { Reporter } from "../Reporter.ts"
import type { MakeReport } from "./Report.ts"
import type { Runtime, Runtimes } from "./Runtimes.ts"

/** How long a boot waits for a template's `ready_cmd` to pass before reporting it not ready. */
const READY_WAIT_MS = 30_000

/** Starts `$1` detached from the exec (its own session, output to a log), so it outlives it. */
// An image's non-root user may not write /var/log: its start log is then in /tmp.
const START_SCRIPT = `mkdir -p /var/log 2>/dev/null; log=/var/log/svc-start.log; [ -w /var/log ] || ` +
  `log=/tmp/svc-start.log; setsid /bin/sh -c "$1" </dev/null >>"$log" 2>&1 & echo started`

const tail = (text: string) => {
  const line = text.trim().split("\n").at(-1)?.slice(0, 200) ?? ""
  return line.length > 0 ? `: ${line}` : ""
}

/** What a boot says of a template's runtime in the sandbox's `running` report (nothing: no template). */
export type RuntimeFields = Pick<AgentReport, "runtimeReady" | "runtimeReason">

export const makeReadiness = Effect.fnUntraced(function*(options: {
  readonly hostId: string
  readonly driver: SandboxDriver["Service"]
  readonly runtimes: Runtimes
  readonly reporter: Reporter["Service"]
  readonly lockOf: (sandboxId: string) => Semaphore.Semaphore
  /** Whether the sandbox was last reported running: a check stops when it is not any more. */
  readonly isRunning: (sandboxId: string) => boolean
  readonly report: MakeReport
}) {
  const { driver, hostId, isRunning, lockOf, report, reporter, runtimes } = options
  const readinessChecks = yield* FiberSet.make<void, never>()

  /** `agent_ready`: an exec of `true` succeeds (a few tries: the first may race the init). */
  const probe = (sandboxId: string) =>
    driver.exec(sandboxId, new DriverExecRequest({ cmd: ["true"], timeoutMs: 5_000 })).pipe(
      Effect.flatMap((result) => (result.exitCode === 0 ? Effect.succeed(true) : Effect.fail("exit"))),
      Effect.retry({ times: 4, schedule: Schedule.spaced(Duration.millis(25)) }),
      Effect.orElseSucceed(() => false)
    )

  /** Tries `ready_cmd` until it passes or `READY_WAIT_MS` ran out, then reports the outcome. */
  const checkReadiness = (sandboxId: string, readyCmd: string) =>
    Effect.gen(function*() {
      // The boot's command holds the lock until it has reported and tracked the sandbox running.
      yield* lockOf(sandboxId).withPermit(Effect.void)
      let reason = "ready_cmd has not passed yet"
      let ready = false
      const deadline = Date.now() + READY_WAIT_MS
      while (Date.now() < deadline && isRunning(sandboxId)) {
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
        if (!isRunning(sandboxId)) return
        const followUp = yield* report(sandboxId, "running", {
          agentReady: true,
          runtimeReady: ready,
          runtimeReason: ready ? null : reason
        })
        yield* reporter.report(followUp, `ready:${hostId}:${sandboxId}:${followUp.at}`).pipe(
          Effect.retry({ times: 10, schedule: Schedule.spaced(Duration.millis(500)) }),
          Effect.catch((e) => Effect.logWarning("agent: readiness report not sent", { sandboxId, error: String(e) }))
        )
      }))
    })

  /**
   * A template sandbox's boot (create and start): its `start_cmd` started in the background
   * (its output in /var/log/svc-start.log inside), then its `ready_cmd` tried until it passes
   * (`runtime_ready`) or `READY_WAIT_MS` ran out (`runtime_reason` says the last failure). A
   * sandbox of no template reports nothing about its runtime.
   */
  const boot = (sandboxId: string, agentReady: boolean) =>
    Effect.gen(function*(): Effect.fn.Return<RuntimeFields> {
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

  /**
   * A template's boot in a warm pool entry (`Pool.ts`), before any create wants it: its
   * `start_cmd` started as `boot` starts it, then its `ready_cmd` tried until it passes (true) or
   * `READY_WAIT_MS` ran out (false: the entry is not kept). Nothing is reported: the entry is no
   * platform sandbox yet.
   */
  const warm = (sandboxId: string, runtime: Runtime) =>
    Effect.gen(function*() {
      if (runtime.startCmd !== null) {
        const started = yield* Effect.result(driver.exec(
          sandboxId,
          new DriverExecRequest({ cmd: ["/bin/sh", "-c", START_SCRIPT, "start", runtime.startCmd], timeoutMs: 10_000 })
        ))
        if (started._tag === "Failure" || started.success.exitCode !== 0) return false
      }
      if (runtime.readyCmd === null) return true
      const deadline = Date.now() + READY_WAIT_MS
      while (Date.now() < deadline) {
        const checked = yield* Effect.result(driver.exec(
          sandboxId,
          new DriverExecRequest({ cmd: ["/bin/sh", "-c", runtime.readyCmd], timeoutMs: 5_000, maxOutputBytes: 4096 })
        ))
        if (checked._tag === "Success" && checked.success.exitCode === 0) return true
        yield* Effect.sleep(Duration.millis(100))
      }
      return false
    })

  return { probe, boot, warm }
})
