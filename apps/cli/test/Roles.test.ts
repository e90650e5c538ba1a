/**
 * The four roles as an operator deploys them: `node apps/<role>/src/main.ts` each, configured
 * by its environment, against one NATS and one Postgres. A sandbox created through that API
 * reaches `running`, its events reach a webhook receiver over real HTTP (signed), and
 * `/v1/workers` lists api, runtime, dispatcher and agent.
 *
 * `GET /v1/health`, polled every 100 ms while the API starts and while it stops (SIGTERM, with
 * an exec in flight and keep-alive clients), is always answered: a status, or a connection
 * refused or reset at once, never a client timeout. The exec in flight finishes; every role
 * exits on its own after SIGTERM, and the agent leaves no warm pool entry behind.
 *
 * `svc dev` runs the same four layers in one process: the same holds, and Ctrl-C (SIGINT) ends
 * every sandbox and warm pool entry it started.
 */
import { expect, layer } from "@effect/vitest"
import { eventually } from "@svc/testing/Eventually"
import { processesOfHost } from "@svc/testing/HostProcesses"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { call } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { appMain, readyEvent, type RoleProcess, spawnRole } from "@svc/testing/TestProcess"
import { receiver } from "@svc/testing/WebhookReceiver"
import { Duration, Effect, Fiber, Layer } from "effect"
import { createHmac } from "node:crypto"
import * as FsSync from "node:fs"
import * as Http from "node:http"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { devOrgApi, rolesSetup } from "./support/Roles.ts"

/** What a poll got: a status code, or how the connection failed; `timeout` is the failure. */
type Outcome = number | string

/** How long a poll may wait for its answer: far longer than any answer takes, even on a loaded machine. */
const POLL_TIMEOUT_MS = 5_000
/** Failures a client sees at once: nothing listens, or the connection was closed under it. */
const IMMEDIATE = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE"])

/**
 * `GET url` every 100 ms until stopped, on a fresh connection each time, and (when `keepAlive`)
 * also through a keep-alive agent, the way a client with a connection pool polls.
 */
const poll = (url: string, options: { readonly keepAlive?: boolean } = {}) => {
  const outcomes: Array<Outcome> = []
  const pending = new Set<Promise<void>>()
  const agent = options.keepAlive === true ? new Http.Agent({ keepAlive: true, maxSockets: 1 }) : undefined
  const one = (via: Http.Agent | false) => {
    const done = new Promise<void>((resolve) => {
      let settled = false
      const settle = (outcome: Outcome) => {
        if (settled) return
        settled = true
        outcomes.push(outcome)
        resolve()
      }
      const request = Http.get(url, { agent: via }, (response) => {
        response.resume()
        response.on("end", () => settle(response.statusCode ?? 0))
        response.on("error", (e: NodeJS.ErrnoException) => settle(e.code ?? e.message))
      })
      // Over the whole exchange, not only while the socket is idle.
      const timer = setTimeout(() => {
        settle("timeout")
        request.destroy()
      }, POLL_TIMEOUT_MS)
      request.on("close", () => clearTimeout(timer))
      request.on("error", (e: NodeJS.ErrnoException) => settle(e.code ?? e.message))
    })
    pending.add(done)
    void done.then(() => pending.delete(done))
  }
  const timer = setInterval(() => {
    one(false)
    if (agent !== undefined) one(agent)
  }, 100)
  return {
    outcomes,
    /** Stops polling; resolves once every poll sent has its outcome. */
    stop: Effect.promise(async () => {
      clearInterval(timer)
      await Promise.all(pending)
      agent?.destroy()
      return [...outcomes]
    })
  }
}

/** Every poll was answered: by a status, or a connection refused or reset at once. */
const expectAllAnswered = (outcomes: ReadonlyArray<Outcome>) => {
  const unanswered = outcomes.filter((o) => typeof o !== "number" && !IMMEDIATE.has(o))
  expect(unanswered, `outcomes: ${JSON.stringify(tally(outcomes))}`).toEqual([])
}

const tally = (outcomes: ReadonlyArray<Outcome>) => {
  const counts: Record<string, number> = {}
  for (const o of outcomes) counts[String(o)] = (counts[String(o)] ?? 0) + 1
  return counts
}

/** A signal (SIGTERM unless told), then the process's own exit (not a kill); fails after `within`. */
const stopGracefully = (child: RoleProcess<unknown>, within: Duration.Input, signal: NodeJS.Signals = "SIGTERM") =>
  Effect.gen(function*() {
    child.process.kill(signal)
    const code = yield* Effect.promise(() => child.exited).pipe(
      Effect.timeoutOrElse({
        duration: within,
        orElse: () => Effect.die(new Error(`no exit after SIGTERM: ${child.output().slice(-3000)}`))
      })
    )
    expect(child.process.signalCode, child.output().slice(-3000)).toBe(null)
    return code
  })

const testLayer = Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer)

layer(testLayer, { excludeTestServices: true })("the roles as separate processes", (it) => {
  it.effect(
    "a sandbox through the API reaches running, its events reach a webhook, /v1/workers lists every role; polls during start and stop are all answered",
    () =>
      Effect.gen(function*() {
        const { agent: agentEnv, base, common, host, port } = yield* rolesSetup("svc-roles-test-")
        const timeout = Duration.seconds(90)

        // Polled from before the API process exists until after it is up.
        const starting = poll(`${base}/v1/health`)
        const [api, runtime, dispatcher, agent] = yield* Effect.all([
          spawnRole({
            main: appMain("api"),
            env: { ...common, SVC_HOST: "127.0.0.1", SVC_PORT: String(port) },
            ready: readyEvent("api_ready"),
            timeout
          }),
          spawnRole({
            main: appMain("runtime"),
            env: common,
            ready: (s) => (s.includes("runtime ready") ? true : undefined),
            timeout
          }),
          spawnRole({ main: appMain("dispatcher"), env: common, ready: readyEvent("dispatcher_ready"), timeout }),
          spawnRole({
            main: appMain("agent"),
            // One warm pool entry: a graceful stop must leave none behind.
            env: { ...agentEnv, SVC_AGENT_POOL_SIZE: "1" },
            ready: readyEvent("agent_ready"),
            timeout
          })
        ], { concurrency: "unbounded" })
        yield* Effect.sleep(Duration.seconds(1))
        const atStart = yield* starting.stop
        expectAllAnswered(atStart)
        expect(atStart).toContain(200)

        const { api: api_ } = yield* devOrgApi(base)

        // A webhook on a receiver of ours, then a sandbox.
        const rx = yield* receiver()
        const hook = yield* api_("POST", "/v1/webhooks", {
          url: rx.url,
          events: ["sandbox.created", "sandbox.state_updated"]
        })
        expect(hook.status, hook.text).toBe(201)
        const secret = hook.json.secret_returned_once as string
        const created = yield* api_("POST", "/v1/sandboxes", { name: "roles" })
        expect(created.status, created.text).toBe(201)
        const sandboxId = created.json.id as string
        const running = yield* eventually(
          api_("GET", `/v1/sandboxes/${sandboxId}`),
          (r) => r.json?.state === "running",
          Duration.seconds(60),
          Duration.millis(200)
        )
        expect(running.json.hostId).toBe(host.hostId)

        // Its events, delivered by the dispatcher process and signed with the webhook's secret.
        const events = () =>
          rx.received.map((r) => ({
            body: JSON.parse(r.body.toString("utf8")),
            signature: r.headers["x-svc-signature"],
            raw: r.body
          }))
        const delivered = yield* eventually(
          Effect.sync(events),
          (es) =>
            es.some((e) => e.body.event === "sandbox.created") && es.some((e) => e.body.data?.state === "running"),
          Duration.seconds(60),
          Duration.millis(100)
        )
        for (const e of delivered) {
          expect(e.body.data.sandbox_id).toBe(sandboxId)
          expect(e.signature).toBe(`sha256=${createHmac("sha256", secret).update(e.raw).digest("hex")}`)
        }

        // Every role's heartbeat.
        const workers = yield* eventually(
          api_("GET", "/v1/workers"),
          (r) =>
            ["api", "runtime", "dispatcher", "agent"].every((role) =>
              r.json?.workers?.some((w: { script_name: string }) => w.script_name === role)
            ),
          Duration.seconds(30),
          Duration.millis(200)
        )
        expect(workers.status).toBe(200)

        // A graceful stop of the API with an exec in flight and clients polling.
        const inFlight = yield* Effect.forkChild(
          api_("POST", `/v1/sandboxes/${sandboxId}/exec`, { cmd: ["sleep", "2"] })
        )
        yield* Effect.sleep(Duration.millis(500))
        const stopping = poll(`${base}/v1/health`, { keepAlive: true })
        yield* Effect.sleep(Duration.millis(500))
        yield* stopGracefully(api, Duration.seconds(30))
        yield* Effect.sleep(Duration.millis(500))
        const atStop = yield* stopping.stop
        expectAllAnswered(atStop)
        expect(atStop).toContain(200)
        expect(atStop).toContain("ECONNREFUSED")
        const exec = yield* Fiber.join(inFlight)
        expect(exec.status, exec.text).toBe(200)
        expect(exec.json.exit_code).toBe(0)

        // The other roles stop on their own too; the agent's pool goes with it, its sandbox stays.
        yield* Effect.all([
          stopGracefully(runtime, Duration.seconds(30)),
          stopGracefully(dispatcher, Duration.seconds(30)),
          stopGracefully(agent, Duration.seconds(30))
        ], { concurrency: "unbounded", discard: true })
        const left = FsSync.readdirSync(NodePath.join(host.dataDir, "sandboxes"))
        expect(left).toEqual([sandboxId])
      }).pipe(Effect.scoped),
    240_000
  )

  it.effect(
    "svc dev: the same roles in one process; polls during its start and stop are all answered; SIGINT ends every sandbox and pool entry it started",
    () =>
      Effect.gen(function*() {
        const { agent: agentEnv, base, databaseUrl, host, port } = yield* rolesSetup("svc-roles-dev-test-")
        const stateDir = yield* Effect.acquireRelease(
          Effect.sync(() => FsSync.mkdtempSync(NodePath.join(Os.tmpdir(), "svc-roles-dev-state-"))),
          (dir) => Effect.sync(() => FsSync.rmSync(dir, { recursive: true, force: true }))
        )

        const starting = poll(`${base}/v1/health`)
        const dev = yield* spawnRole({
          main: appMain("cli"),
          args: ["dev"],
          env: {
            // Given these (the database, and NATS in the agent's), svc dev starts no NATS or
            // Postgres of its own.
            ...agentEnv,
            DATABASE_URL: databaseUrl,
            SVC_STATE_DIR: stateDir,
            SVC_PORT: String(port),
            SVC_AGENT_POOL_SIZE: "1"
          },
          // The dev org's key is printed once every role is up.
          ready: (stdout) => (stdout.includes("api key") ? true : undefined),
          timeout: Duration.seconds(90)
        })
        yield* Effect.sleep(Duration.seconds(1))
        const atStart = yield* starting.stop
        expectAllAnswered(atStart)
        expect(atStart).toContain(200)

        const token = JSON.parse(FsSync.readFileSync(NodePath.join(stateDir, "dev-credentials.json"), "utf8"))
          .api_key as string
        const api_ = (method: string, path: string, body?: unknown) =>
          call(base, method, path, { token, ...(body !== undefined ? { body } : {}) })
        const created = yield* api_("POST", "/v1/sandboxes", { name: "dev" })
        expect(created.status, created.text).toBe(201)
        const sandboxId = created.json.id as string
        yield* eventually(
          api_("GET", `/v1/sandboxes/${sandboxId}`),
          (r) => r.json?.state === "running",
          Duration.seconds(60),
          Duration.millis(200)
        )
        const sandboxes = Effect.sync(() => FsSync.readdirSync(NodePath.join(host.dataDir, "sandboxes")))
        // The pool refilled: a sandbox of its own besides the tenant's.
        yield* eventually(
          sandboxes,
          (names) => names.some((n) => n.startsWith("pool-")),
          Duration.seconds(60),
          Duration.millis(200)
        )
        yield* eventually(
          api_("GET", "/v1/workers"),
          (r) =>
            ["api", "runtime", "dispatcher", "agent"].every((role) =>
              r.json?.workers?.some((w: { script_name: string }) => w.script_name === role)
            ),
          Duration.seconds(30),
          Duration.millis(200)
        )
        expect(processesOfHost(host.hostId).length).toBeGreaterThan(0)

        // Ctrl-C with an exec in flight and clients polling.
        const inFlight = yield* Effect.forkChild(
          api_("POST", `/v1/sandboxes/${sandboxId}/exec`, { cmd: ["sleep", "2"] })
        )
        yield* Effect.sleep(Duration.millis(500))
        const stopping = poll(`${base}/v1/health`, { keepAlive: true })
        yield* Effect.sleep(Duration.millis(500))
        yield* stopGracefully(dev, Duration.seconds(60), "SIGINT")
        yield* Effect.sleep(Duration.millis(500))
        const atStop = yield* stopping.stop
        expectAllAnswered(atStop)
        expect(atStop).toContain("ECONNREFUSED")
        const exec = yield* Fiber.join(inFlight)
        expect(exec.status, exec.text).toBe(200)
        expect(exec.json.exit_code).toBe(0)

        // Nothing it started runs any more: the pool entry is gone, the tenant's sandbox stopped (its files kept).
        expect(yield* sandboxes).toEqual([sandboxId])
        expect(processesOfHost(host.hostId)).toEqual([])
      }).pipe(Effect.scoped),
    240_000
  )
})
