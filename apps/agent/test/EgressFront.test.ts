/**
 * The egress front's bounds (packages/egress/native/svc-egress-front.c) attacked from inside
 * real sandboxes, as issue 25 (item 10) found them: one sandbox opens many connections with half
 * a request each and holds them (`fixtures/egress-holder.c`, built static on the host). Past the
 * per-sandbox cap a new connection is reset at once, another sandbox still connects, the machine
 * cap holds for every sandbox together, the front keeps one thread and 2 fds per held connection
 * (counted in /proc, not timed), an idle connection is closed and its count released.
 */
import { assert, layer } from "@effect/vitest"
import { ensureBucket } from "@svc/bus/Topology"
import { makeSandboxId } from "@svc/domain/Ids"
import { DEFAULT_MAX_CONNECTIONS_PER_SANDBOX } from "@svc/egress/Config"
import { EGRESS_BUCKET_SPEC, type SandboxEgress, sandboxEgressKey } from "@svc/host-protocol/Egress"
import { API, fakePublicHost } from "@svc/testing/FakePublicHost"
import { Context, Effect, Layer, Logger } from "effect"
import { execFileSync } from "node:child_process"
import * as FsSync from "node:fs"
import { fileURLToPath } from "node:url"
import {
  createCommand,
  eventually,
  makeHost,
  publishCommand,
  Reports,
  type RunningAgent,
  startAgent,
  testLayer
} from "../testing/Agent.ts"

/** The default per-sandbox cap; a machine-wide cap that two sandboxes reach together. */
const PER_SANDBOX = DEFAULT_MAX_CONNECTIONS_PER_SANDBOX
const TOTAL = PER_SANDBOX + 128
const IDLE_SECONDS = 4
const ORG = "org_00000000000000000000000000"

const utf8 = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8")

const logLines: Array<string> = []
const collector = Logger.make((options) => {
  logLines.push(`${options.logLevel} ${JSON.stringify(options.message)}`)
})

class Front extends Context.Service<Front, {
  readonly agent: RunningAgent
  readonly a: string
  readonly b: string
  readonly address: string
  readonly tcpPort: number
}>()("test/EgressFront") {
  static readonly layer = Layer.effect(
    Front,
    Effect.gen(function*() {
      const { address, agentOptions, dir } = yield* fakePublicHost
      const egress = {
        ...agentOptions.egress,
        maxConnections: TOTAL,
        idleTimeoutSeconds: IDLE_SECONDS
      }
      const testHost = yield* makeHost
      const agent = yield* startAgent(testHost, { ...agentOptions, egress })
      const reports = yield* Reports
      const holder = `${dir}/egress-holder`
      execFileSync("cc", [
        "-O2",
        "-static",
        "-o",
        holder,
        fileURLToPath(new URL("./fixtures/egress-holder.c", import.meta.url))
      ])
      const start = (sandboxId: string) =>
        Effect.gen(function*() {
          yield* publishCommand(testHost.hostId, createCommand(sandboxId))
          const report = yield* reports.waitFor(sandboxId, (r) => r.status !== "running" || r.agentReady === true)
          if (report.status !== "running") throw new Error(`the sandbox did not start: ${JSON.stringify(report)}`)
          yield* Effect.addFinalizer(() => Effect.ignore(agent.driver.destroy(sandboxId)))
          yield* agent.driver.writeFile(sandboxId, "/root/holder", FsSync.readFileSync(holder), 0o755)
          // An open policy, as the control plane writes it for every sandbox.
          const kv = yield* ensureBucket(EGRESS_BUCKET_SPEC)
          const entry: SandboxEgress = { sandboxId, orgId: ORG, policy: { allow_out: [], deny_out: [] }, secretIds: [] }
          yield* Effect.promise(() => kv.put(sandboxEgressKey(sandboxId), JSON.stringify(entry)))
        })
      const a = makeSandboxId()
      const b = makeSandboxId()
      yield* start(a)
      yield* start(b)
      return { agent, a, b, address, tcpPort: egress.tcpPort }
    })
  )
}

const fileLayer = Front.layer.pipe(
  Layer.provideMerge(testLayer),
  Layer.provide(Logger.layer([collector], { mergeWithExisting: true }))
)

const inside = (sandboxId: string, script: string) =>
  Effect.gen(function*() {
    const { agent } = yield* Front
    const result = yield* agent.driver.exec(sandboxId, { cmd: ["sh", "-c", script], timeoutMs: 30_000 })
    return utf8(result.stdout) + utf8(result.stderr)
  })

interface Held {
  readonly opened: number
  readonly closed: number
  readonly firstClosed: number
  readonly answered: number
}

/** Starts a holder of `count` connections in the background; its status file and trickle file are named by `tag`. */
const hold = (sandboxId: string, tag: string, count: number) =>
  Effect.gen(function*() {
    const { address } = yield* Front
    yield* inside(
      sandboxId,
      `touch /tmp/trickle-${tag}; /root/holder ${address} 80 ${count} ${API} /tmp/status-${tag} /tmp/trickle-${tag} ` +
        `</dev/null >/dev/null 2>&1 & echo $! > /tmp/pid-${tag}`
    )
  })

const status = (sandboxId: string, tag: string) =>
  Effect.map(inside(sandboxId, `cat /tmp/status-${tag} 2>/dev/null`), (text): Held => {
    const m = /opened (\d+) closed (\d+) first-closed (-?\d+) answered (\d+)/.exec(text)
    return m === null
      ? { opened: 0, closed: 0, firstClosed: -1, answered: 0 }
      : { opened: Number(m[1]), closed: Number(m[2]), firstClosed: Number(m[3]), answered: Number(m[4]) }
  })

const release = (sandboxId: string, tag: string) => inside(sandboxId, `kill $(cat /tmp/pid-${tag}); true`)

/** The front's process (this agent's: its port is on the command line): threads and open fds. */
const frontCounts = Effect.gen(function*() {
  const { tcpPort } = yield* Front
  for (const pid of FsSync.readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    let args: Array<string>
    try {
      args = FsSync.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")
    } catch {
      continue
    }
    if (!/\/svc-egress-front(-[0-9a-f]+)?$/.test(args[0] ?? "") || args[2] !== String(tcpPort)) continue
    const threads = Number(/Threads:\s+(\d+)/.exec(FsSync.readFileSync(`/proc/${pid}/status`, "utf8"))?.[1])
    return { pid, threads, fds: FsSync.readdirSync(`/proc/${pid}/fd`).length }
  }
  throw new Error("the front is not running")
})

const curl = (sandboxId: string, path: string) =>
  inside(sandboxId, `curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://${API}${path}; echo " exit=$?"`)

layer(fileLayer, { excludeTestServices: true, timeout: 240_000 })("the egress front's bounds", (it) => {
  it.effect("past its cap a sandbox's new connections are reset at once; another sandbox still connects; the machine-wide cap holds; each held connection costs the front 2 fds and no thread", () =>
    Effect.gen(function*() {
      const { a, b } = yield* Front
      const before = yield* frontCounts
      // Sandbox A: 10 connections past its cap, half a request each: the first 256 are held, the last 10 reset.
      yield* hold(a, "a", PER_SANDBOX + 10)
      const heldA = yield* eventually(status(a, "a"), (s) => s.opened === PER_SANDBOX + 10 && s.closed >= 10)
      assert.strictEqual(heldA.closed, 10, JSON.stringify(heldA))
      assert.strictEqual(heldA.firstClosed, PER_SANDBOX, JSON.stringify(heldA))
      assert.strictEqual(heldA.answered, 0, "a refusal is a reset, not an answer")
      // The front's cost: one thread whatever it holds, 2 fds per held connection.
      const during = yield* eventually(frontCounts, (c) => c.fds >= before.fds + 2 * PER_SANDBOX)
      assert.strictEqual(during.pid, before.pid)
      assert.strictEqual(during.threads, 1)
      assert.strictEqual(before.threads, 1)
      assert.isAtMost(during.fds, before.fds + 2 * PER_SANDBOX)
      // Sandbox B is not A: its request goes through while A sits at its cap.
      assert.include(yield* curl(b, "/from-b"), "200 exit=0")
      // A itself is refused.
      assert.notInclude(yield* curl(a, "/from-a"), "200")
      // Logged once (rate-limited per sandbox), naming the sandbox and the cap.
      const tooMany = yield* eventually(
        Effect.sync(() => logLines.filter((line) => line.includes("egress: too many connections"))),
        (lines) => lines.some((line) => line.includes(a) && line.includes(`${PER_SANDBOX} per sandbox`))
      )
      assert.isAtMost(tooMany.filter((line) => line.includes(a)).length, 2, tooMany.join("\n"))
      // The machine-wide cap: B gets the 128 left (once its curl's connection is gone), the other 10 are reset.
      yield* eventually(frontCounts, (c) => c.fds === before.fds + 2 * PER_SANDBOX)
      yield* hold(b, "b", TOTAL - PER_SANDBOX + 10)
      const heldB = yield* eventually(status(b, "b"), (s) => s.opened === TOTAL - PER_SANDBOX + 10 && s.closed >= 10)
      assert.strictEqual(heldB.closed, 10, JSON.stringify(heldB))
      assert.strictEqual(heldB.firstClosed, TOTAL - PER_SANDBOX, JSON.stringify(heldB))
      const full = yield* frontCounts
      assert.strictEqual(full.threads, 1)
      assert.isAtMost(full.fds, before.fds + 2 * TOTAL)
      yield* eventually(
        Effect.sync(() => logLines.filter((line) => line.includes("egress: too many connections"))),
        (lines) => lines.some((line) => line.includes(b) && line.includes(`${TOTAL} on the host`))
      )
      // Released: the counts go back, and A connects again.
      yield* release(a, "a")
      yield* release(b, "b")
      yield* eventually(frontCounts, (c) => c.fds === before.fds)
      assert.include(yield* curl(a, "/again"), "200 exit=0")
    }))

  it.effect("a relayed connection with no byte either way for the idle timeout is closed, and its count released", () =>
    Effect.gen(function*() {
      const { a } = yield* Front
      const before = yield* frontCounts
      yield* hold(a, "idle", 5)
      const held = yield* eventually(status(a, "idle"), (s) => s.opened === 5)
      assert.strictEqual(held.closed, 0)
      yield* eventually(frontCounts, (c) => c.fds === before.fds + 10)
      // Trickling bytes keeps them; once they stop, the front closes all five without an answer.
      yield* inside(a, "rm /tmp/trickle-idle")
      const idle = yield* eventually(status(a, "idle"), (s) => s.closed === 5)
      assert.strictEqual(idle.answered, 0, "closed by the front, not answered by the proxy")
      yield* eventually(frontCounts, (c) => c.fds === before.fds)
      yield* release(a, "idle")
    }))
})
