/**
 * A runtime process killed with SIGKILL while sandboxes are being created and deleted: its
 * messages come back to the next runtime process, nothing is lost, and no transition happens
 * twice (each sandbox's events on the EVENTS stream are exactly one per state change).
 * The runtime runs as a child process (apps/runtime/src/main.ts) against the test's Postgres
 * and NATS; the API and a real agent run in the test process.
 */
import { expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { kill, spawnRole } from "@svc/testing/TestProcess"
import { Context, Duration, Effect, Layer, Scope } from "effect"
import type { ChildProcess } from "node:child_process"
import { fileURLToPath } from "node:url"
import { call, EventLog, eventually, Identity, makeHost, serveApi, startAgent } from "../../testing/Sandboxes.ts"

const MAIN = fileURLToPath(new URL("../../../runtime/src/main.ts", import.meta.url))
const COUNT = 16

class Env extends Context.Service<Env, {
  readonly base: string
  readonly token: string
  /** Starts a runtime process; resolves once it consumes. Killed at the end of the scope. */
  readonly runtime: Effect.Effect<ChildProcess>
}>()("SandboxesCrash.test/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const base = yield* serveApi
    const org = yield* (yield* Identity).org("crash")
    const host = yield* makeHost
    yield* startAgent(host, { region: "local" })
    const nats = yield* TestNats.TestNatsServer
    const databaseUrl = yield* TestDatabase.TestDatabaseUrl
    const scope = yield* Effect.scope
    const runtime = spawnRole({
      main: MAIN,
      env: {
        DATABASE_URL: databaseUrl,
        NATS_URL: nats.url,
        SVC_NATS_PREFIX: nats.prefix,
        // A killed process's message is back within 1.5 s.
        SVC_ACTOR_ACK_WAIT: "1500ms",
        SVC_SUPERVISOR_INTERVAL: "500ms"
      },
      ready: (stdout) => (stdout.includes("runtime ready") ? true : undefined)
    }).pipe(Effect.map((role) => role.process), Effect.provideService(Scope.Scope, scope))
    return { base, token: org.token, runtime }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Identity.layer, EventLog.layer)),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

layer(EnvLayer, { excludeTestServices: true, timeout: 240_000 })("runtime killed with SIGKILL", (it) => {
  it.effect(
    "while creates and deletes are in flight: every sandbox converges, each state change is one event",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        const log = yield* EventLog
        const api = (method: string, path: string, body?: unknown) =>
          call(env.base, method, path, { token: env.token, ...(body !== undefined ? { body } : {}) })
        // One list call per look (polling each sandbox would run into the per-key rate limit).
        const states = (ids: ReadonlyArray<string>) =>
          Effect.map(api("GET", "/v1/sandboxes?paginated=false"), (r) => {
            const byId = new Map<string, string>(
              (r.json?.rows ?? []).map((row: { id: string; state: string }) => [row.id, row.state])
            )
            return ids.map((id) => byId.get(id) ?? "?")
          })
        const running = Effect.map(log.all, (es) =>
          new Set(
            es.filter((e) => e.event === "sandbox.state_updated" && e.data.state === "running").map((e) =>
              e.data.sandbox_id
            )
          ))

        const first = yield* env.runtime
        const created = yield* Effect.forEach(
          Array.from({ length: COUNT }, (_, i) => i),
          (i) =>
            Effect.map(api("POST", "/v1/sandboxes", { region: "local", ram_mb: 64, name: `crash-${i}` }), (r) =>
              r.json.id as string),
          { concurrency: 8 }
        )
        // Kill it once some sandboxes run and others are still on their way.
        yield* eventually(running, (set) =>
          set.size >= 2)
        yield* kill(first)
        const before = (yield* running).size
        expect(before).toBeLessThan(COUNT)

        const second = yield* env.runtime
        yield* eventually(states(created), (s) => s.every((x) => x === "running"), Duration.seconds(90))

        // Deletes in flight, and a kill again.
        yield* Effect.forEach(created, (id) => api("DELETE", `/v1/sandboxes/${id}`), { concurrency: 8 })
        yield* eventually(
          Effect.map(log.all, (es) => es.filter((e) => e.event === "sandbox.deleted").length),
          (n) => n >= 1
        )
        yield* kill(second)
        yield* env.runtime
        yield* eventually(states(created), (s) => s.every((x) => x === "deleted"), Duration.seconds(90))

        for (const id of created) {
          const events = yield* eventually(log.of(id), (es) => es.some((e) => e.event === "sandbox.deleted"))
          const labels = events.map((
            e
          ) => (e.event === "sandbox.state_updated" ? `${e.event}:${e.data.state}` : e.event))
          expect(labels, id).toEqual([
            "sandbox.state_updated:starting",
            "sandbox.created",
            "sandbox.state_updated:running",
            "sandbox.state_updated:deleting",
            "sandbox.state_updated:deleted",
            "sandbox.deleted"
          ])
        }
      }),
    180_000
  )
})
