/**
 * A sandbox's lifecycle through the public API, on the real platform (Postgres, NATS, the runtime
 * role with its supervisor, a real agent running bubblewrap): idleness judged by work (a
 * background process keeps a sandbox awake, an idle one stops with `reason: idle`), the
 * keep-alive, auto-resume shared by concurrent callers, `on_timeout: delete`, `auto_delete_s`,
 * and the refusals of bad settings. Idle timeouts of seconds keep it fast (the supervisor sweeps
 * every 200 ms here; a host reports activity at most once a second).
 */
import { expect, layer } from "@effect/vitest"
import { IDLE_GRACE_MS } from "@svc/sandboxes/Sandboxes/Lifecycle"
import { Duration, Effect } from "effect"
import * as Http from "node:http"
import { api, create, Env, EnvLayer, eventsOf, expectError, get, waitState } from "../../testing/SandboxesEnv.ts"

const exec = (id: string, cmd: ReadonlyArray<string>) => api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd } })
const setTimeout = (id: string, body: unknown) => api("PUT", `/v1/sandboxes/${id}/timeout`, { body })
const remove = (ids: ReadonlyArray<string>) =>
  Effect.forEach(ids, (id) => api("DELETE", `/v1/sandboxes/${id}`), { concurrency: 4, discard: true })

/** A request through the preview host (a key allowed on the sandbox in `Authorization`): its status. */
const previewRequest = (base: string, host: string, token: string) =>
  Effect.callback<number>((resume) => {
    const url = new URL(base)
    const request = Http.request({
      host: url.hostname,
      port: url.port,
      path: "/",
      agent: false,
      headers: { host, authorization: `Bearer ${token}` }
    }, (response) => {
      response.resume()
      response.on("end", () => resume(Effect.succeed(response.statusCode ?? 0)))
    })
    request.on("error", () => resume(Effect.succeed(0)))
    request.end()
  })

/** The `reason` of the sandbox's last `sandbox.state_updated` to `state`. */
const reasonOf = (id: string, state: string) =>
  Effect.map(
    eventsOf(id, `sandbox.state_updated:${state}`),
    ({ events }) => events.findLast((e) => e.event === "sandbox.state_updated" && e.data.state === state)!.data.reason
  )

layer(EnvLayer, { excludeTestServices: true, timeout: 240_000 })("sandboxes API: lifecycle", (it) => {
  it.effect("an idle sandbox stops with reason idle; one running `sleep 60` in the background does not", () =>
    Effect.gen(function*() {
      const idle = yield* create({ region: "local", idle_timeout_s: 2 })
      const working = yield* create({ region: "local", idle_timeout_s: 2 })
      expect(idle).toMatchObject({ idle_timeout_s: 2, on_timeout: "stop", auto_resume: false, stop_reason: null })
      yield* waitState(idle.id, "running")
      yield* waitState(working.id, "running")
      const started = yield* api("POST", `/v1/sandboxes/${working.id}/processes`, { body: { cmd: ["sleep", "60"] } })
      expect(started.status, started.text).toBe(201)
      const lastCall = Date.now()

      const stopped = yield* waitState(idle.id, "stopped", Duration.seconds(30))
      expect(stopped.stop_reason).toBe("idle")
      expect(stopped.lastActivityAt).not.toBe(null)
      expect(yield* reasonOf(idle.id, "stopping")).toBe("idle")
      expect(yield* reasonOf(idle.id, "stopped")).toBe("idle")
      // Stopped: a call is 409 without auto_resume.
      expectError(yield* exec(idle.id, ["true"]), 409, "conflict")

      // Well past the idle limit since the last call on it, the busy one still runs.
      const past = 2_000 + IDLE_GRACE_MS + 3_000 - (Date.now() - lastCall)
      if (past > 0) yield* Effect.sleep(Duration.millis(past))
      const still = yield* get(working.id)
      expect(still.json).toMatchObject({ state: "running", stop_reason: null })
      // Once the process ends it is idle again, and stops.
      const kill = yield* api("POST", `/v1/sandboxes/${working.id}/processes/${started.json.pid}/signal`, {
        body: { signal: "KILL" }
      })
      expect(kill.status, kill.text).toBe(202)
      const after = yield* waitState(working.id, "stopped", Duration.seconds(30))
      expect(after.stop_reason).toBe("idle")
      yield* remove([idle.id, working.id])
    }))

  it.effect("keep-alive: PUT .../timeout counts timeout_s again from now; left alone it stops with reason timeout", () =>
    Effect.gen(function*() {
      const created = yield* create({ region: "local", timeout_s: 4 })
      expect(created).toMatchObject({ timeout_s: 4, expiresAt: null })
      const running = yield* waitState(created.id, "running")
      const firstEnd = Date.parse(running.expiresAt)
      expect(firstEnd - Date.parse(running.startedAt)).toBe(4_000)
      // Kept alive past its first end.
      for (let i = 0; i < 4; i++) {
        yield* Effect.sleep(Duration.millis(1_500))
        const kept = yield* setTimeout(created.id, { timeout_s: 4 })
        expect(kept.status, kept.text).toBe(200)
        expect(kept.json).toMatchObject({ state: "running", timeout_s: 4 })
        expect(Date.parse(kept.json.expiresAt)).toBeGreaterThan(Date.parse(running.expiresAt))
      }
      expect(Date.now()).toBeGreaterThan(firstEnd)
      expect((yield* get(created.id)).json.state).toBe("running")
      // Removed and set again: null, then a new end.
      const removed = yield* setTimeout(created.id, { timeout_s: null, idle_timeout_s: 600 })
      expect(removed.json).toMatchObject({ timeout_s: null, expiresAt: null, idle_timeout_s: 600 })
      expect((yield* setTimeout(created.id, { timeout_s: 2 })).json).toMatchObject({
        timeout_s: 2,
        idle_timeout_s: 600
      })
      const stopped = yield* waitState(created.id, "stopped", Duration.seconds(20))
      expect(stopped).toMatchObject({ stop_reason: "timeout", expiresAt: null })
      expect(yield* reasonOf(created.id, "stopped")).toBe("timeout")
      // A user's stop and start: `user`, then null while running again.
      expect((yield* api("POST", `/v1/sandboxes/${created.id}/start`)).status).toBe(202)
      expect((yield* waitState(created.id, "running")).stop_reason).toBe(null)
      yield* setTimeout(created.id, { timeout_s: null })
      expect((yield* api("POST", `/v1/sandboxes/${created.id}/stop`)).json.stop_reason).toBe("user")
      expect((yield* waitState(created.id, "stopped")).stop_reason).toBe("user")
      yield* remove([created.id])
    }))

  it.effect("auto_resume: 10 concurrent calls on a stopped sandbox share one start and are all served", () =>
    Effect.gen(function*() {
      const created = yield* create({ region: "local", auto_resume: true, exposed_ports: [8080] })
      yield* waitState(created.id, "running")
      yield* exec(created.id, ["sh", "-c", "echo kept > /root/kept"])
      expect((yield* api("POST", `/v1/sandboxes/${created.id}/stop`)).status).toBe(202)
      yield* waitState(created.id, "stopped")
      const startsBefore = (yield* eventsOf(created.id, "sandbox.state_updated:stopped")).labels
        .filter((l) => l === "sandbox.state_updated:starting").length

      const answers = yield* Effect.forEach(
        Array.from({ length: 10 }, (_, i) => i),
        (i) => exec(created.id, ["sh", "-c", `cat /root/kept; echo ${i}`]),
        { concurrency: "unbounded" }
      )
      const all = JSON.stringify(answers.map((a) => a.json))
      answers.forEach((a, i) => {
        expect(a.status, a.text).toBe(200)
        expect(a.json, all).toMatchObject({ exit_code: 0, stdout: `kept\n${i}\n` })
      })
      expect((yield* get(created.id)).json).toMatchObject({ state: "running", stop_reason: null })
      const { labels } = yield* eventsOf(created.id, "sandbox.state_updated:running")
      expect(labels.filter((l) => l === "sandbox.state_updated:starting").length).toBe(startsBefore + 1)

      // Files and processes resume it too.
      yield* api("POST", `/v1/sandboxes/${created.id}/stop`)
      yield* waitState(created.id, "stopped")
      const file = yield* api("GET", `/v1/sandboxes/${created.id}/files?path=/root/kept`)
      expect(file.status, file.text).toBe(200)
      expect(file.text).toBe("kept\n")
      yield* api("POST", `/v1/sandboxes/${created.id}/stop`)
      yield* waitState(created.id, "stopped")
      const proc = yield* api("POST", `/v1/sandboxes/${created.id}/processes`, { body: { cmd: ["true"] } })
      expect(proc.status, proc.text).toBe(201)
      // Reading its record or its stats does not.
      yield* api("POST", `/v1/sandboxes/${created.id}/stop`)
      yield* waitState(created.id, "stopped")
      expectError(yield* api("GET", `/v1/sandboxes/${created.id}/stats`), 409, "conflict")
      expect((yield* get(created.id)).json.state).toBe("stopped")
      // A preview request starts it too (nothing listens on the port yet: the proxy's own answer).
      const env = yield* Env
      const viaPreview = yield* previewRequest(env.base, `8080-${created.id}.preview.localhost`, env.org.token)
      expect(viaPreview, "a preview request on a stopped sandbox").not.toBe(409)
      expect((yield* get(created.id)).json).toMatchObject({ state: "running", stop_reason: null })
      yield* remove([created.id])
    }))

  it.effect("on_timeout delete deletes it (reason timeout); auto_delete_s deletes a stopped one", () =>
    Effect.gen(function*() {
      const expiring = yield* create({ region: "local", timeout_s: 1, on_timeout: "delete" })
      const kept = yield* create({ region: "local", auto_delete_s: 1 })
      yield* waitState(kept.id, "running")
      const gone = yield* waitState(expiring.id, "deleted", Duration.seconds(30))
      expect(gone).toMatchObject({ stop_reason: "timeout", on_timeout: "delete" })

      expect((yield* api("POST", `/v1/sandboxes/${kept.id}/stop`)).status).toBe(202)
      yield* waitState(kept.id, "stopped")
      const deleted = yield* waitState(kept.id, "deleted", Duration.seconds(30))
      expect(deleted).toMatchObject({ stop_reason: "user", auto_delete_s: 1 })
      yield* eventsOf(kept.id, "sandbox.deleted")
    }))

  it.effect("bad settings are 400 naming the field; PUT .../timeout is confined to the org", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const bad: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
        [{ idle_timeout_s: -1 }, "idle_timeout_s"],
        [{ idle_timeout_s: 0 }, "idle_timeout_s"],
        [{ idle_timeout_s: 2_592_001 }, "idle_timeout_s"],
        [{ idle_timeout_s: "60" }, "idle_timeout_s"],
        [{ idle_timeout_s: 1.5 }, "idle_timeout_s"],
        [{ auto_delete_s: 0 }, "auto_delete_s"],
        [{ auto_delete_s: 1e12 }, "auto_delete_s"],
        [{ timeout_s: -5 }, "timeout_s"],
        [{ on_timeout: "pause" }, "on_timeout"],
        [{ on_timeout: null }, "on_timeout"],
        [{ auto_resume: "yes" }, "auto_resume"]
      ]
      for (const [body, field] of bad) {
        const res = yield* api("POST", "/v1/sandboxes", { body: { region: "local", ...body } })
        expectError(res, 400, "invalid_request")
        expect(res.json.issues.map((i: { path: string }) => String(i.path)), JSON.stringify(body)).toContain(field)
      }
      const created = yield* create({ region: "local" })
      for (
        const body of [
          { timeout_s: -1 },
          { timeout_s: 0 },
          { idle_timeout_s: 2_592_001 },
          { idle_timeout_s: "x" },
          { timeout_s: true },
          { keep: 1 },
          []
        ]
      ) {
        expectError(yield* setTimeout(created.id, body), 400, "invalid_request")
      }
      expectError(
        yield* api("PUT", `/v1/sandboxes/${created.id}/timeout`, { body: { timeout_s: 5 }, token: env.other.token }),
        404,
        "not_found"
      )
      expectError(yield* setTimeout("sbx_00000000000000000000000000", { timeout_s: 5 }), 404, "not_found")
      // An empty body changes nothing; the limits themselves are accepted.
      const same = yield* setTimeout(created.id, {})
      expect(same.status, same.text).toBe(200)
      expect((yield* setTimeout(created.id, { timeout_s: 2_592_000, idle_timeout_s: 1 })).json).toMatchObject({
        timeout_s: 2_592_000,
        idle_timeout_s: 1
      })
      yield* setTimeout(created.id, { timeout_s: null, idle_timeout_s: null })
      yield* api("DELETE", `/v1/sandboxes/${created.id}`)
      yield* waitState(created.id, "deleted")
      expectError(yield* setTimeout(created.id, { timeout_s: 5 }), 409, "conflict")
    }))
})
