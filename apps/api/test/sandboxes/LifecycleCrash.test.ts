/**
 * Issue 29's chaos: a runtime or an agent killed -9 in the middle of an idle stop, a fork or a
 * resume loses nothing (the files written before are there after, the fork's copies hold them,
 * the call that resumed is served) and leaves no sandbox stuck (each ends in the state the
 * operation leads to, within a minute, far below the 2 min transition timeout that would
 * otherwise end it in `error`).
 *
 * The API, the runtime and the agent run as processes of their own (`apps/<role>/src/main.ts`)
 * against the test's NATS and Postgres; the killed one is started again with the same settings,
 * as systemd's `Restart=always` does. Each moment is hit twice, the runtime killed once and the
 * agent once. About 1.5 minutes on a loaded 2-core machine (over the usual 60 s: six restarts
 * of a role, each agent start preparing its host, and every sandbox waited to its end state).
 */
import { expect, layer } from "@effect/vitest"
import * as AuthLayer from "@svc/auth/AuthLayer"
import { ensureDevOrg } from "@svc/auth/DevOrg"
import { eventually } from "@svc/testing/Eventually"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { makeHost } from "@svc/testing/TestHost"
import { call } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { appMain, freePort, kill, readyEvent, type RoleProcess, spawnRole } from "@svc/testing/TestProcess"
import { Context, Duration, Effect, Layer, Scope } from "effect"

type Role = "runtime" | "agent"

class Roles extends Context.Service<Roles, {
  readonly base: string
  readonly token: string
  /** kill -9 of the role's process, then a new one with the same settings; completes once it is ready. */
  readonly crash: (role: Role) => Effect.Effect<void>
}>()("LifecycleCrash.test/Roles") {}

const RolesLayer = Layer.effect(
  Roles,
  Effect.gen(function*() {
    const nats = yield* TestNats.TestNatsServer
    const databaseUrl = yield* TestDatabase.TestDatabaseUrl
    const host = yield* makeHost("svc-lifecycle-crash-")
    const port = yield* freePort
    const scope = yield* Effect.scope
    const common = { DATABASE_URL: databaseUrl, NATS_URL: nats.url, SVC_NATS_PREFIX: nats.prefix }
    const timeout = Duration.seconds(120)
    const start = (role: "api" | Role): Effect.Effect<RoleProcess<unknown>> => {
      switch (role) {
        case "api":
          return spawnRole({
            main: appMain("api"),
            env: {
              ...common,
              SVC_HOST: "127.0.0.1",
              SVC_PORT: String(port),
              // The test looks at its sandboxes every 20 ms around a kill: above the default rate limit.
              SVC_RATE_LIMIT_PER_SECOND: "100000",
              SVC_RATE_LIMIT_BURST: "100000"
            },
            ready: readyEvent("api_ready"),
            timeout
          }).pipe(Effect.provideService(Scope.Scope, scope))
        case "runtime":
          return spawnRole({
            main: appMain("runtime"),
            env: {
              ...common,
              // A killed process's messages come back within 1.5 s; the sweeps (idleness) every 200 ms.
              SVC_ACTOR_ACK_WAIT: "1500ms",
              SVC_SUPERVISOR_INTERVAL: "200ms"
            },
            ready: (s) => (s.includes("runtime ready") ? true : undefined),
            timeout
          }).pipe(Effect.provideService(Scope.Scope, scope))
        case "agent":
          return spawnRole({
            main: appMain("agent"),
            env: {
              NATS_URL: nats.url,
              SVC_NATS_PREFIX: nats.prefix,
              SVC_HOST_ID: host.hostId,
              SVC_AGENT_DATA_DIR: host.dataDir,
              // No warm pool: every start is a sandbox's own, and the machine has less to do.
              SVC_AGENT_POOL_SIZE: "0",
              SVC_HOST_CPU: "16",
              SVC_HOST_RAM_MB: "16384",
              SVC_HOST_DISK_GB: "100"
            },
            ready: readyEvent("agent_ready"),
            timeout
          }).pipe(Effect.provideService(Scope.Scope, scope))
      }
    }
    const [_api, runtime, agent] = yield* Effect.all([start("api"), start("runtime"), start("agent")], {
      concurrency: "unbounded"
    })
    const current: Record<Role, RoleProcess<unknown>> = { runtime, agent }
    const org = yield* ensureDevOrg(null).pipe(Effect.provide(AuthLayer.operatorLayer), Effect.orDie)
    return {
      base: `http://127.0.0.1:${port}`,
      token: org.api_key,
      crash: (role: Role) =>
        Effect.gen(function*() {
          yield* kill(current[role].process)
          current[role] = yield* start(role)
        })
    }
  })
).pipe(Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer)))

const api = (method: string, path: string, body?: unknown) =>
  Effect.flatMap(
    Effect.service(Roles),
    (roles) => call(roles.base, method, path, { token: roles.token, ...(body !== undefined ? { body } : {}) })
  )

const MINUTE = Duration.seconds(60)
const stateOf = (id: string) => Effect.map(api("GET", `/v1/sandboxes/${id}`), (r) => r.json as Record<string, any>)

/** The sandbox once it is in `state` (failing on `error`, or when it is not there within a minute: stuck). */
const reaches = (id: string, state: string) =>
  Effect.map(
    eventually(
      stateOf(id),
      (s) => s?.state === state || (s?.state === "error" && state !== "error"),
      MINUTE,
      Duration.millis(200)
    ),
    (s) => {
      expect(s.state, JSON.stringify(s)).toBe(state)
      return s
    }
  )

/** Polls every 20 ms until the sandbox is in one of `states` (the moment to kill in); what it saw. */
const catchIn = (id: string, states: ReadonlyArray<string>) =>
  Effect.map(
    eventually(stateOf(id), (s) => states.includes(s?.state), MINUTE, Duration.millis(20)),
    (s) => s.state as string
  )

/** An exec through the API; a 503 (the host or the control plane away for a moment) is tried again. */
const sh = (id: string, script: string) =>
  Effect.map(
    eventually(
      api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["sh", "-c", script] }),
      (r) => r.status !== 503,
      MINUTE,
      Duration.millis(500)
    ),
    (r) => {
      expect(r.status, r.text).toBe(200)
      return r.json as { exit_code: number; stdout: string }
    }
  )

const created = (body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/sandboxes", body)
    expect(res.status, res.text).toBe(201)
    return yield* reaches(res.json.id as string, "running")
  })

/** Deletes them; each must end `deleted` (a delete stuck behind the crash shows here). */
const removeAll = (ids: ReadonlyArray<string>) =>
  Effect.forEach(ids, (id) =>
    Effect.gen(function*() {
      const res = yield* api("DELETE", `/v1/sandboxes/${id}`)
      expect([202, 404], res.text).toContain(res.status)
      yield* reaches(id, "deleted")
    }), { concurrency: 4, discard: true })

/** No sandbox of the org is left between states. */
const noneStuck = Effect.gen(function*() {
  const list = yield* api("GET", "/v1/sandboxes?paginated=false")
  expect(list.status, list.text).toBe(200)
  const between = (list.json.rows as Array<{ id: string; state: string }>).filter((s) =>
    ["pending", "starting", "stopping", "deleting"].includes(s.state)
  )
  expect(between).toEqual([])
})

const ROLES: ReadonlyArray<Role> = ["runtime", "agent"]

layer(RolesLayer, { excludeTestServices: true, timeout: 600_000 })("lifecycle with a role killed -9", (it) => {
  it.effect("in the middle of an idle stop: it ends stopped (reason idle) and starts again with its files", () =>
    Effect.gen(function*() {
      const roles = yield* Roles
      for (const role of ROLES) {
        const s = yield* created({ idle_timeout_s: 2 })
        yield* sh(s.id, `echo kept-${role} > /root/kept`)
        // Idle 2 s after that exec: killed as it stops (or just after, on a slow look).
        yield* catchIn(s.id, ["stopping", "stopped"])
        yield* roles.crash(role)
        const stopped = yield* reaches(s.id, "stopped")
        expect(stopped.stop_reason, role).toBe("idle")
        expect((yield* api("POST", `/v1/sandboxes/${s.id}/start`)).status).toBe(202)
        yield* reaches(s.id, "running")
        expect((yield* sh(s.id, "cat /root/kept")).stdout, role).toBe(`kept-${role}\n`)
        yield* removeAll([s.id])
        yield* noneStuck
      }
    }))

  it.effect("in the middle of a fork: every fork runs with the source's files, the source keeps running", () =>
    Effect.gen(function*() {
      const roles = yield* Roles
      for (const role of ROLES) {
        const source = yield* created({})
        yield* sh(source.id, `mkdir -p /data && head -c 1048576 /dev/urandom > /data/blob && md5sum /data/blob`)
        const sum = (yield* sh(source.id, "md5sum < /data/blob")).stdout
        // The fork and the kill at once: the kill lands while the snapshot is made or the forks start.
        const [forked] = yield* Effect.all([
          api("POST", `/v1/sandboxes/${source.id}/fork`, { count: 3 }),
          Effect.andThen(Effect.sleep(Duration.millis(role === "agent" ? 100 : 300)), roles.crash(role))
        ], { concurrency: "unbounded" })
        // The agent killed under the snapshot: refused as unavailable (never a 500), and the same
        // fork asked again once it is back is served.
        const fork = forked.status === 503
          ? yield* eventually(
            api("POST", `/v1/sandboxes/${source.id}/fork`, { count: 3 }),
            (r) => r.status !== 503,
            MINUTE,
            Duration.millis(500)
          )
          : forked
        expect(fork.status, fork.text).toBe(201)
        const ids = (fork.json.sandboxes as Array<{ id: string }>).map((f) => f.id)
        expect(ids.length).toBe(3)
        for (const id of ids) {
          yield* reaches(id, "running")
          expect((yield* sh(id, "md5sum < /data/blob")).stdout, `${role}: ${id}`).toBe(sum)
        }
        expect((yield* stateOf(source.id)).state).toBe("running")
        expect((yield* sh(source.id, "md5sum < /data/blob")).stdout).toBe(sum)
        // A fork stopped and started again after the restart still stacks the snapshot: a
        // restarted agent once dropped every layer its image store lacked, forks' included.
        expect((yield* api("POST", `/v1/sandboxes/${ids[0]}/stop`)).status).toBe(202)
        yield* reaches(ids[0]!, "stopped")
        expect((yield* api("POST", `/v1/sandboxes/${ids[0]}/start`)).status).toBe(202)
        yield* reaches(ids[0]!, "running")
        expect((yield* sh(ids[0]!, "md5sum < /data/blob")).stdout, role).toBe(sum)
        yield* removeAll([...ids, source.id])
        yield* noneStuck
      }
    }))

  it.effect("in the middle of a resume: the call that resumed it is served, its files are there", () =>
    Effect.gen(function*() {
      const roles = yield* Roles
      for (const role of ROLES) {
        const s = yield* created({ auto_resume: true })
        yield* sh(s.id, `echo resumed-${role} > /root/kept`)
        expect((yield* api("POST", `/v1/sandboxes/${s.id}/stop`)).status).toBe(202)
        yield* reaches(s.id, "stopped")
        // The exec that resumes it, and the kill while it starts.
        const [served] = yield* Effect.all([
          api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: ["cat", "/root/kept"] }),
          Effect.andThen(catchIn(s.id, ["starting", "running"]), roles.crash(role))
        ], { concurrency: "unbounded" })
        // Served once it runs; or, the host gone for a moment under it, a 503 to retry (never a 500).
        expect([200, 503], served.text).toContain(served.status)
        const result = served.status === 200 ? served.json : yield* sh(s.id, "cat /root/kept")
        expect(result.stdout, role).toBe(`resumed-${role}\n`)
        expect((yield* reaches(s.id, "running")).stop_reason).toBe(null)
        yield* removeAll([s.id])
        yield* noneStuck
      }
    }))
})
