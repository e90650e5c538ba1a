/**
 * Code contexts across API processes (docs/contract.md#code-contexts): the records are rows of
 * Postgres, so a context created through this test's API is run, listed and deleted through a
 * second API process (apps/api/src/main.ts spawned on the same NATS and Postgres); the 16 per
 * sandbox hold when creates race through both; a deleted sandbox's contexts are gone.
 * A real agent and a `debian` sandbox (its root from the run's image cache).
 */
import { expect, layer } from "@effect/vitest"
import { startAgent } from "@svc/agent/testing/Agent"
import { call, eventually, Identity, makeHost, serveApi } from "@svc/api/testing/Sandboxes"
import { SecretBox } from "@svc/crypto/SecretBox"
import { MAX_CONTEXTS_PER_SANDBOX } from "@svc/domain/Api/Contexts"
import type { OrgId } from "@svc/domain/Ids"
import * as Runtime from "@svc/runtime/Runtime"
import { TEST_IMAGE_CACHE_DIR } from "@svc/testing/ImageCache"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { appMain, freePort, readyEvent, spawnRole } from "@svc/testing/TestProcess"
import { Context, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"

class Env extends Context.Service<Env, {
  /** The API in this test's process. */
  readonly one: string
  /** A second API process on the same database. */
  readonly two: string
  readonly org: { readonly id: OrgId; readonly token: string }
}>()("test/ContextsShared/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const one = yield* serveApi
    const host = yield* makeHost
    yield* startAgent(host, {
      region: "local",
      capacity: { cpu: 64, ramMb: 64 * 1024, diskGb: 500 },
      imageCacheDir: TEST_IMAGE_CACHE_DIR
    })
    const nats = yield* TestNats.TestNatsServer
    const port = yield* freePort
    yield* spawnRole({
      main: appMain("api"),
      env: {
        DATABASE_URL: yield* TestDatabase.TestDatabaseUrl,
        NATS_URL: nats.url,
        SVC_NATS_PREFIX: nats.prefix,
        SVC_HOST: "127.0.0.1",
        SVC_PORT: String(port)
      },
      ready: readyEvent("api_ready")
    })
    const identity = yield* Identity
    return { one, two: `http://127.0.0.1:${port}`, org: yield* identity.org("contexts-shared") }
  })
).pipe(
  Layer.provideMerge(
    Layer.mergeAll(Runtime.make({ supervisor: { intervalMs: 200, transitionTimeoutMs: 540_000 } }), Identity.layer)
  ),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

const api = (base: "one" | "two", method: string, path: string, body?: unknown) =>
  Effect.flatMap(
    Effect.service(Env),
    (env) => call(env[base], method, path, { token: env.org.token, ...(body !== undefined ? { body } : {}) })
  )

const rowsOf = (id: string) =>
  Effect.flatMap(
    Effect.service(SqlClient.SqlClient),
    (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM code_contexts WHERE sandbox_id = ${id}`
  ).pipe(Effect.map((rows) => rows[0]!.n))

const running = Effect.gen(function*() {
  const created = yield* api("one", "POST", "/v1/sandboxes", { template: "debian", ram_mb: 512, region: "local" })
  expect(created.status, created.text).toBe(201)
  const id = created.json.id as string
  // The first `debian` sandbox of a fresh clone builds the debian root (the runtime waits as long).
  const ready = yield* eventually(
    api("one", "GET", `/v1/sandboxes/${id}`),
    (r) => r.json?.state === "running" || r.json?.state === "error",
    Duration.minutes(9)
  )
  expect(ready.json.state, ready.text).toBe("running")
  return id
})

layer(EnvLayer, { excludeTestServices: true, timeout: 600_000 })("code contexts across API processes", (it) => {
  it.effect(
    "made through one API process, run, listed and deleted through another; 20 racing creates: 16; gone with the sandbox",
    () =>
      Effect.gen(function*() {
        const id = yield* running

        // Made through the first, its state kept whichever process takes the run.
        const made = yield* api("one", "POST", `/v1/sandboxes/${id}/contexts`, { language: "python" })
        expect(made.status, made.text).toBe(201)
        const ctx = made.json.id as string
        const first = yield* api("one", "POST", `/v1/sandboxes/${id}/contexts/${ctx}/run`, { code: "x = 41" })
        expect(first.status, first.text).toBe(200)
        const second = yield* api("two", "POST", `/v1/sandboxes/${id}/contexts/${ctx}/run`, { code: "x + 1" })
        expect(second.status, second.text).toBe(200)
        expect(second.json).toMatchObject({ execution_count: 2, results: [{ type: "text/plain", data: "42" }] })
        const listed = yield* api("two", "GET", `/v1/sandboxes/${id}/contexts`)
        expect(listed.status, listed.text).toBe(200)
        expect(listed.json.contexts).toMatchObject([{ id: ctx, language: "python", state: "idle" }])
        expect((yield* api("two", "GET", `/v1/sandboxes/${id}/contexts/${ctx}`)).json).toMatchObject({ id: ctx })
        // Deleted through the second: gone for the first too.
        expect((yield* api("two", "DELETE", `/v1/sandboxes/${id}/contexts/${ctx}`)).status).toBe(204)
        expect((yield* api("one", "GET", `/v1/sandboxes/${id}/contexts/${ctx}`)).status).toBe(404)

        // 20 creates at once, alternating between the processes: the limit is the database's.
        const raced = yield* Effect.forEach(
          Array.from({ length: 20 }, (_, i) => i),
          (i) => api(i % 2 === 0 ? "one" : "two", "POST", `/v1/sandboxes/${id}/contexts`, { language: "python" }),
          { concurrency: "unbounded" }
        )
        const statuses = raced.map((r) => r.status)
        const why = JSON.stringify(raced.filter((r) => r.status !== 201).map((r) => r.text))
        expect(statuses.filter((s) => s === 201).length, why).toBe(MAX_CONTEXTS_PER_SANDBOX)
        expect(statuses.filter((s) => s === 409).length, why).toBe(20 - MAX_CONTEXTS_PER_SANDBOX)
        expect(yield* rowsOf(id)).toBe(MAX_CONTEXTS_PER_SANDBOX)
        const all = yield* api("one", "GET", `/v1/sandboxes/${id}/contexts`)
        expect(all.json.contexts.length).toBe(MAX_CONTEXTS_PER_SANDBOX)
        // The refused creates' interpreters were ended: the sandbox runs one per context kept.
        const serving = yield* eventually(
          api("two", "POST", `/v1/sandboxes/${id}/exec`, {
            cmd: [
              "sh",
              "-c",
              `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q "kernel[.]py serve" && echo x; done | wc -l`
            ]
          }),
          (r) => Number(r.json?.stdout) === MAX_CONTEXTS_PER_SANDBOX,
          Duration.seconds(20)
        )
        expect(Number(serving.json.stdout), serving.text).toBe(MAX_CONTEXTS_PER_SANDBOX)

        // The sandbox deleted: its contexts' rows go with it.
        expect((yield* api("one", "DELETE", `/v1/sandboxes/${id}`)).status).toBeLessThan(300)
        yield* eventually(
          api("one", "GET", `/v1/sandboxes/${id}`),
          (r) => r.status === 404 || r.json?.state === "deleted",
          Duration.minutes(1)
        )
        expect(yield* rowsOf(id)).toBe(0)
        const after = yield* api("two", "GET", `/v1/sandboxes/${id}/contexts`)
        expect(after.status === 404 ? [] : after.json.contexts, after.text).toEqual([])
      }),
    720_000
  ) // it may build the debian root first (see `running`)

  it.effect("a pid now another process's (its start time differs) is not taken for the interpreter: dead, and not signalled", () =>
    Effect.gen(function*() {
      const id = yield* running
      const made = yield* api("two", "POST", `/v1/sandboxes/${id}/contexts`, { language: "python" })
      expect(made.status, made.text).toBe(201)
      const ctx = made.json.id as string
      const other = yield* api("one", "POST", `/v1/sandboxes/${id}/processes`, { cmd: ["sleep", "600"] })
      expect(other.status, other.text).toBe(201)
      // As if the interpreter had ended and the sandbox given its pid to this process: the row's
      // pid is the sleep's, its recorded start time still the interpreter's.
      const sql = yield* Effect.service(SqlClient.SqlClient)
      yield* sql`UPDATE code_contexts SET pid = ${other.json.pid as number} WHERE id = ${ctx}`
      const got = yield* api("one", "GET", `/v1/sandboxes/${id}/contexts/${ctx}`)
      expect(got.json, got.text).toMatchObject({ id: ctx, state: "dead" })
      expect((yield* api("two", "POST", `/v1/sandboxes/${id}/contexts/${ctx}/interrupt`)).status).toBe(409)
      expect((yield* api("two", "DELETE", `/v1/sandboxes/${id}/contexts/${ctx}`)).status).toBe(204)
      const sleep = yield* api("one", "GET", `/v1/sandboxes/${id}/processes/${other.json.pid}`)
      expect(sleep.json, sleep.text).toMatchObject({ state: "running" })
    }))
})
