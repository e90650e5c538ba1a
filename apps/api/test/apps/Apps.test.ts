/**
 * Apps through the public API and the CLI (docs/contract.md#apps), on one real platform: the API
 * over HTTP, the runtime role (its app controller reconciling every 500 ms), two real agents (host A with more memory, so replicas go there first,
 * and host B), two orgs. Replicas are real `base` sandboxes running the app's cmd.
 *
 * What the user sees: an app reaching its replicas, scaled up and down, a replica whose cmd is
 * killed from inside replaced, a rolling update that never drops below `replicas - 1` ready
 * (polled and recorded throughout), an agent stopped and its replicas made again on the other
 * host, delete removing the sandboxes; and the refusals (400, 403, 404, 409, 402).
 */
import { expect, layer } from "@effect/vitest"
import { startAgent as startAgentFixture } from "@svc/agent/testing/Agent"
import { SecretBox } from "@svc/crypto/SecretBox"
import type { OrgId } from "@svc/domain/Ids"
import * as Runtime from "@svc/runtime/Runtime"
import { eventually as waitUntil } from "@svc/testing/Eventually"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Duration, Effect, Layer } from "effect"
import { type Answer, call, eventually, Identity, makeHost, serveApi } from "../../testing/Sandboxes.ts"
import { runSvc } from "../support/Cli.ts"

class Env extends Context.Service<Env, {
  readonly base: string
  readonly hostA: string
  readonly hostB: string
  readonly stopA: Effect.Effect<void>
  readonly org: { readonly id: OrgId; readonly token: string }
  readonly other: { readonly id: OrgId; readonly token: string }
  readonly key: (scopes: ReadonlyArray<string>) => Effect.Effect<string>
}>()("Apps.test/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const base = yield* serveApi
    const identity = yield* Identity
    const a = yield* makeHost
    const b = yield* makeHost
    const capacity = (ramMb: number) => ({ cpu: 64, ramMb, diskGb: 500 })
    const agentA = yield* startAgentFixture(a, { region: "local", capacity: capacity(64 * 1024) })
    yield* startAgentFixture(b, { region: "local", capacity: capacity(32 * 1024) })
    const org = yield* identity.org("apps-a")
    return {
      base,
      hostA: a.hostId,
      hostB: b.hostId,
      stopA: agentA.stop,
      org,
      other: yield* identity.org("apps-b"),
      key: (scopes) => identity.key(org.id, scopes)
    }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(
    Runtime.make({
      supervisor: { intervalMs: 200, transitionTimeoutMs: 15_000 },
      apps: { interval: Duration.millis(500) }
    }),
    Identity.layer
  )),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

const api = (method: string, path: string, options: Parameters<typeof call>[3] = {}) =>
  Effect.flatMap(Effect.service(Env), (env) => call(env.base, method, path, { token: env.org.token, ...options }))

const expectError = (res: Answer, status: number, code: string) => {
  expect(res.status, res.text).toBe(status)
  expect(res.json.code, res.text).toBe(code)
  expect(typeof res.json.error).toBe("string")
}

type AppRecord = {
  id: string
  state: string
  replicas: number
  ready_replicas: number
  sandbox_ids: Array<string>
  revision: number
  reason: string | null
  [k: string]: unknown
}

const createApp = (body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/apps", { body })
    expect(res.status, res.text).toBe(201)
    return res.json as AppRecord
  })

const getApp = (id: string) => Effect.map(api("GET", `/v1/apps/${id}`), (r) => r.json as AppRecord)

/** Waits (generously: a loaded machine) until the app satisfies `check`. */
const waitApp = (id: string, check: (app: AppRecord) => boolean, timeout: Duration.Input = Duration.seconds(90)) =>
  Effect.map(eventually(getApp(id), check, timeout), (app) => {
    expect(check(app), JSON.stringify(app)).toBe(true)
    return app
  })

const runningWith = (n: number) => (app: AppRecord) =>
  app.state === "running" && app.ready_replicas === n && app.sandbox_ids.length === n

const sandbox = (id: string) => Effect.map(api("GET", `/v1/sandboxes/${id}`), (r) => r.json as Record<string, any>)

const exec = (id: string, cmd: ReadonlyArray<string>) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd } }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.json as { exit_code: number; stdout: string; stderr: string }
  })

/** Waits until each sandbox is deleted (or being deleted, on its way). */
const waitGone = (ids: ReadonlyArray<string>) =>
  Effect.forEach(ids, (id) =>
    eventually(sandbox(id), (s) => s.state === "deleted", Duration.seconds(60)).pipe(
      Effect.tap((s) => Effect.sync(() => expect(s.state, JSON.stringify(s)).toBe("deleted")))
    ))

const svc = (args: ReadonlyArray<string>) =>
  Effect.flatMap(Effect.service(Env), (env) => runSvc({ base: env.base, token: env.org.token }, args))

// A command that runs until killed, and leaves a mark of its env.
const SERVE = ["sh", "-c", "echo \"$GREETING\" > /tmp/app-started; exec sleep 100000"]

layer(EnvLayer, { excludeTestServices: true, timeout: 600_000 })("apps", (it) => {
  it.effect("refusals: 400 with the invalid fields, 403 scopes and single-sandbox keys, 404 another org's, 409 name", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const missing = yield* api("POST", "/v1/apps", { body: { name: "x", template: "base" } })
      expectError(missing, 400, "invalid_request")
      expect(missing.json.issues.map((i: { path: string }) => i.path)).toContain("cmd")
      const bad = yield* api("POST", "/v1/apps", {
        body: { name: "Not A Label", template: "base", cmd: [], replicas: 101, env: { "1x": "y" } }
      })
      expectError(bad, 400, "invalid_request")
      expect(bad.json.issues.map((i: { path: string }) => i.path).sort()).toEqual(
        expect.arrayContaining(["name", "cmd", "replicas"])
      )
      const template = yield* api("POST", "/v1/apps", { body: { name: "x", template: "nope", cmd: ["true"] } })
      expectError(template, 400, "invalid_request")
      expect(template.json.issues).toEqual([{ path: "template", message: "no ready template \"nope\" in this org" }])
      const list = yield* api("GET", "/v1/apps?limit=0")
      expectError(list, 400, "invalid_request")

      // A 0-replica app: nothing runs, and it is `running` at once.
      const idle = yield* createApp({ name: "idle", template: "base", cmd: ["true"], replicas: 0 })
      expect(idle).toMatchObject({ name: "idle", state: "running", replicas: 0, ready_replicas: 0, sandbox_ids: [] })
      expect(idle.id).toMatch(/^app_/)
      expect(JSON.stringify(idle)).not.toContain("env")
      expectError(
        yield* api("POST", "/v1/apps", { body: { name: "idle", template: "base", cmd: ["true"] } }),
        409,
        "conflict"
      )
      const patchBad = yield* api("PATCH", `/v1/apps/${idle.id}`, { body: { replicas: -1 } })
      expectError(patchBad, 400, "invalid_request")

      // Scopes: read cannot write; another resource's scope reads nothing; a sandbox key nothing.
      const reader = yield* env.key(["apps:read"])
      expect((yield* api("GET", `/v1/apps/${idle.id}`, { token: reader })).status).toBe(200)
      const write = yield* api("PATCH", `/v1/apps/${idle.id}`, { token: reader, body: { replicas: 1 } })
      expectError(write, 403, "insufficient_scope")
      expect(write.json.required_scope).toBe("apps:write")
      const sandboxesOnly = yield* env.key(["sandboxes:write"])
      const denied = yield* api("GET", "/v1/apps", { token: sandboxesOnly })
      expectError(denied, 403, "insufficient_scope")
      expect(denied.json.required_scope).toBe("apps:read")
      const box = yield* api("POST", "/v1/sandboxes", { body: {} })
      expect(box.status).toBe(201)
      const single = yield* env.key([`sandbox:${box.json.id}`])
      expect((yield* api("GET", "/v1/apps", { token: single })).status).toBe(403)
      expect(
        (yield* api("POST", "/v1/apps", { token: single, body: { name: "s", template: "base", cmd: ["true"] } }))
          .status
      ).toBe(403)
      expect((yield* api("DELETE", `/v1/sandboxes/${box.json.id}`)).status).toBe(202)

      // Another org's app is not found, for every route; its list does not show it.
      for (const [method, body] of [["GET", undefined], ["PATCH", { replicas: 2 }], ["DELETE", undefined]] as const) {
        const res = yield* api(method, `/v1/apps/${idle.id}`, { token: env.other.token, ...(body ? { body } : {}) })
        expectError(res, 404, "not_found")
      }
      const theirs = yield* api("GET", "/v1/apps", { token: env.other.token })
      expect(theirs.json).toEqual({ apps: [], total: 0, offset: 0, limit: 50, has_more: false })

      // Lists page like the others, newest first.
      const second = yield* createApp({ name: "idle-2", template: "base", cmd: ["true"], replicas: 0 })
      const page = yield* api("GET", "/v1/apps?limit=1")
      expect(page.json).toMatchObject({ total: 2, offset: 0, limit: 1, has_more: true })
      expect(page.json.apps.map((a: AppRecord) => a.id)).toEqual([second.id])
      const next = yield* api("GET", "/v1/apps?limit=1&offset=1")
      expect(next.json).toMatchObject({ total: 2, has_more: false })
      expect(next.json.apps.map((a: AppRecord) => a.id)).toEqual([idle.id])

      // Deleted: not found, its name free again; the audit log has each change.
      for (const id of [idle.id, second.id]) {
        const gone = yield* api("DELETE", `/v1/apps/${id}`)
        expect(gone.status).toBe(200)
        expect(gone.json.state).toBe("deleted")
        expectError(yield* api("GET", `/v1/apps/${id}`), 404, "not_found")
      }
      const audit = yield* api("GET", "/v1/audit?limit=500")
      const actions = audit.json.entries
        .filter((e: { target_id: string }) => e.target_id === idle.id)
        .map((e: { action: string }) => e.action)
      expect(actions.sort()).toEqual(["app.created", "app.deleted"])
    }))

  it.effect("402: an org blocked at its hard limit cannot create apps or scale them up", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const org = { token: env.other.token }
      const app = yield* api("POST", "/v1/apps", {
        ...org,
        body: { name: "later", template: "base", cmd: ["true"], replicas: 0 }
      })
      expect(app.status).toBe(201)
      const limits = yield* api("PUT", "/v1/billing/limits", { ...org, body: { hard_limit_micros: 0 } })
      expect(limits.status, limits.text).toBe(200)
      expect(limits.json.blocked).toBe(true)
      const refused = yield* api("POST", "/v1/apps", { ...org, body: { name: "now", template: "base", cmd: ["true"] } })
      expectError(refused, 402, "usage_limit_reached")
      expectError(
        yield* api("PATCH", `/v1/apps/${app.json.id}`, { ...org, body: { replicas: 1 } }),
        402,
        "usage_limit_reached"
      )
      // Scaling down or to the same is no use of more.
      expect((yield* api("PATCH", `/v1/apps/${app.json.id}`, { ...org, body: { replicas: 0 } })).status).toBe(200)
      expect((yield* api("PUT", "/v1/billing/limits", { ...org, body: { hard_limit_micros: null } })).status).toBe(200)
      expect((yield* api("DELETE", `/v1/apps/${app.json.id}`, org)).status).toBe(200)
    }))

  it.effect("an app reaches its replicas, scales up and down, and a replica whose cmd is killed is replaced", () =>
    Effect.gen(function*() {
      const created = yield* createApp({
        name: "web",
        template: "base",
        cmd: SERVE,
        replicas: 2,
        env: { GREETING: "hello from the app" }
      })
      expect(created).toMatchObject({ state: "deploying", replicas: 2, ready_replicas: 0, revision: 1, cmd: SERVE })
      const running = yield* waitApp(created.id, runningWith(2))
      expect(running.reason).toBe(null)
      // Each replica is a sandbox of the org running the cmd, with the app's env.
      for (const id of running.sandbox_ids) {
        const s = yield* sandbox(id)
        expect(s).toMatchObject({ state: "running", metadata: { app_id: created.id } })
        expect((yield* exec(id, ["cat", "/tmp/app-started"])).stdout).toBe("hello from the app\n")
        const ps = yield* api("GET", `/v1/sandboxes/${id}/processes`)
        expect(
          ps.json.processes.filter((p: { state: string }) => p.state === "running").map((p: { cmd: unknown }) => p.cmd)
        )
          .toEqual([SERVE])
      }

      const up = yield* api("PATCH", `/v1/apps/${created.id}`, { body: { replicas: 3 } })
      expect(up.status, up.text).toBe(200)
      expect(up.json).toMatchObject({ replicas: 3, state: "deploying" })
      const three = yield* waitApp(created.id, runningWith(3))
      expect(three.sandbox_ids.slice(0, 2)).toEqual(running.sandbox_ids)

      const down = yield* api("PATCH", `/v1/apps/${created.id}`, { body: { replicas: 1 } })
      expect(down.json.replicas).toBe(1)
      const one = yield* waitApp(created.id, runningWith(1))
      const dropped = three.sandbox_ids.filter((id) => !one.sandbox_ids.includes(id))
      expect(dropped).toHaveLength(2)
      yield* waitGone(dropped)

      // The cmd killed from inside the replica: it is replaced by a new sandbox.
      const [victim] = one.sandbox_ids
      const ps = yield* api("GET", `/v1/sandboxes/${victim}/processes`)
      const cmd = ps.json.processes.find((p: { state: string }) => p.state === "running") as { pid: number }
      const killed = yield* exec(victim!, ["kill", String(cmd.pid)])
      expect(killed.exit_code, killed.stderr).toBe(0)
      const replaced = yield* waitApp(created.id, (a) => runningWith(1)(a) && !a.sandbox_ids.includes(victim!))
      expect(replaced.sandbox_ids).toHaveLength(1)
      yield* waitGone([victim!])

      // Delete: the app goes, and its sandboxes with it.
      const gone = yield* api("DELETE", `/v1/apps/${created.id}`)
      expect(gone.status).toBe(200)
      expect(["deleting", "deleted"]).toContain(gone.json.state)
      yield* eventually(api("GET", `/v1/apps/${created.id}`), (r) => r.status === 404, Duration.seconds(60))
      yield* waitGone(replaced.sandbox_ids)
    }))

  it.effect("a rolling update replaces every replica one at a time, never below replicas - 1 ready", () =>
    Effect.gen(function*() {
      const created = yield* createApp({
        name: "roll",
        template: "base",
        cmd: SERVE,
        replicas: 2,
        env: { GREETING: "v1" }
      })
      const before = yield* waitApp(created.id, runningWith(2))
      const patched = yield* api("PATCH", `/v1/apps/${created.id}`, {
        body: { env: { GREETING: "v2" }, cmd: ["sh", "-c", "echo \"$GREETING\" > /tmp/app-started; exec sleep 100001"] }
      })
      expect(patched.status, patched.text).toBe(200)
      expect(patched.json).toMatchObject({ revision: 2, state: "deploying", ready_replicas: 2 })
      // Polled throughout, every 25 ms (under the key's 50/s; an update from the warm pool takes a
      // few hundred ms): ready never under 1, never more than 3 sandboxes.
      const seen: Array<AppRecord> = []
      const after = yield* waitUntil(
        Effect.tap(getApp(created.id), (a) => Effect.sync(() => seen.push(a))),
        (a) => runningWith(2)(a) && a.sandbox_ids.every((id) => !before.sandbox_ids.includes(id)),
        Duration.seconds(120),
        Duration.millis(25)
      )
      expect(runningWith(2)(after), JSON.stringify(after)).toBe(true)
      // The polls saw the update under way, not only its end.
      expect(seen.filter((a) => a.state === "deploying").length, JSON.stringify(seen)).toBeGreaterThan(0)
      expect(Math.min(...seen.map((a) => a.ready_replicas))).toBeGreaterThanOrEqual(1)
      expect(Math.max(...seen.map((a) => a.sandbox_ids.length))).toBeLessThanOrEqual(3)
      for (const id of after.sandbox_ids) {
        expect((yield* exec(id, ["cat", "/tmp/app-started"])).stdout).toBe("v2\n")
      }
      yield* waitGone(before.sandbox_ids)
      // The same env again is no new revision.
      const same = yield* api("PATCH", `/v1/apps/${created.id}`, { body: { env: { GREETING: "v2" } } })
      expect(same.json).toMatchObject({ revision: 2, state: "running" })
      expect((yield* api("DELETE", `/v1/apps/${created.id}`)).status).toBe(200)
      yield* waitGone(after.sandbox_ids)
    }))

  it.effect("the CLI: svc app create, list, get, scale, update, delete with --json", () =>
    Effect.gen(function*() {
      const made = yield* svc([
        "app",
        "create",
        "--name",
        "cli",
        "--replicas",
        "1",
        "--env",
        "GREETING=cli",
        "--json",
        "--",
        ...SERVE
      ])
      expect(made.code, made.stderr).toBe(0)
      const app = JSON.parse(made.stdout) as AppRecord
      expect(app).toMatchObject({ name: "cli", template: "base", cmd: SERVE, replicas: 1 })
      const listed = yield* svc(["app", "list", "--json"])
      expect(listed.code, listed.stderr).toBe(0)
      expect(JSON.parse(listed.stdout).apps.map((a: AppRecord) => a.id)).toContain(app.id)
      yield* waitApp(app.id, runningWith(1))
      const got = yield* svc(["app", "get", app.id, "--json"])
      expect(JSON.parse(got.stdout)).toMatchObject({ id: app.id, state: "running", ready_replicas: 1 })
      const scaled = yield* svc(["app", "scale", app.id, "2", "--json"])
      expect(scaled.code, scaled.stderr).toBe(0)
      expect(JSON.parse(scaled.stdout)).toMatchObject({ id: app.id, replicas: 2 })
      const updated = yield* svc(["app", "update", app.id, "--env", "GREETING=again", "--json"])
      expect(updated.code, updated.stderr).toBe(0)
      expect(JSON.parse(updated.stdout)).toMatchObject({ revision: 2 })
      // Plain output for people, and a refusal as the CLI prints one.
      const plain = yield* svc(["app", "get", app.id])
      expect(plain.stdout).toContain(app.id)
      const missing = yield* svc(["app", "get", "app_00000000000000000000000000"])
      expect(missing.code).toBe(1)
      expect(missing.stderr).toContain("not_found")
      const deleted = yield* svc(["app", "delete", app.id, "--json"])
      expect(deleted.code, deleted.stderr).toBe(0)
      expect(["deleting", "deleted"]).toContain(JSON.parse(deleted.stdout).state)
      yield* eventually(api("GET", `/v1/apps/${app.id}`), (r) => r.status === 404, Duration.seconds(60))
    }))

  it.effect("an agent stopped: its replicas are made again on the other host", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const created = yield* createApp({ name: "moves", template: "base", cmd: SERVE, replicas: 2 })
      const before = yield* waitApp(created.id, runningWith(2))
      // Host A has the most room: both replicas went there.
      for (const id of before.sandbox_ids) expect((yield* sandbox(id)).hostId).toBe(env.hostA)
      yield* env.stopA
      const after = yield* waitApp(
        created.id,
        (a) => runningWith(2)(a) && a.sandbox_ids.every((id) => !before.sandbox_ids.includes(id)),
        Duration.seconds(120)
      )
      for (const id of after.sandbox_ids) expect((yield* sandbox(id)).hostId).toBe(env.hostB)
      yield* waitGone(before.sandbox_ids)
      expect((yield* api("DELETE", `/v1/apps/${created.id}`)).status).toBe(200)
      yield* waitGone(after.sandbox_ids)
    }))
})
